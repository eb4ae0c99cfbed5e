-- A recurring schedule may put its jobs in a group (outside review 169). In a
-- grouped or rate-limited queue, a schedule's jobs could only go without a group,
-- and jobs without a group wait behind older or higher-priority jobs of the groups
-- (see claim_queue(), 0019 and 0041); the README tells users to give every job of
-- a grouped queue a key. NULL: no group, as before. A worker of an older version
-- registering the same schedule leaves the column as it is.
ALTER TABLE :SCHEMA.cron_schedules
  ADD COLUMN group_key text,
  ADD CONSTRAINT cron_schedules_group_key_check CHECK (length(group_key) BETWEEN 1 AND 128);
