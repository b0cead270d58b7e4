-- Declared lineage of marts.orders_daily (built by the build_marts DAG).
SELECT o.ordered_on AS day,
       COUNT(*) AS orders,
       SUM(o.amount) AS revenue
FROM crm.orders AS o
GROUP BY o.ordered_on
