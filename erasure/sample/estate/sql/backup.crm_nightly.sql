-- The nightly backup is a full copy of the customer master.
SELECT * FROM crm.customers
