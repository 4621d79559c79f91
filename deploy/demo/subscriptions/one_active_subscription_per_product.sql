-- description: A customer holds at most one active subscription to each product; a second one bills them twice.
-- severity: critical
-- owner: "@subscriptions-oncall"
-- key: [customer_id, product]

SELECT customer_id,
       product,
       array_agg(subscription_id ORDER BY subscription_id) AS subscription_ids
FROM subscriptions
WHERE status = 'active'
GROUP BY customer_id, product
HAVING count(*) > 1
