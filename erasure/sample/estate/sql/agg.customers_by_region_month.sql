-- Published statistics, produced once a month by finance.
SELECT c.region AS region,
       o.month AS month,
       COUNT(DISTINCT c.id) AS n_customers
FROM crm.customers AS c
JOIN crm.orders AS o ON o.customer_id = c.id
GROUP BY c.region, o.month
