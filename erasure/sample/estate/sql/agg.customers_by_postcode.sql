SELECT a.postcode AS postcode,
       COUNT(*) AS n_customers
FROM crm.customers AS c
JOIN crm.addresses AS a ON a.id = c.address_id
GROUP BY a.postcode
