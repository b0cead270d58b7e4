SELECT SUBSTR(d.day, 1, 7) AS month,
       SUM(d.revenue) AS revenue
FROM marts.orders_daily AS d
GROUP BY SUBSTR(d.day, 1, 7)
