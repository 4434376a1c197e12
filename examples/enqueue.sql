-- Enqueue work from any program, with plain SQL: a running kairos worker starts it within a second.
-- (psql "$DATABASE_URL" -f examples/enqueue.sql)

-- Once, sequential per task type (the defaults):
INSERT INTO queue_items (task_type, payload) VALUES ('send_email', '{"to":"a@b.c"}');

-- Three times, concurrently, before lower-priority work:
INSERT INTO queue_items (task_type, payload, priority, max_runs, thread) VALUES ('resize', '{"image":42}', 10, 3, 1);

-- Inside your own transaction: the item exists only if the transaction commits.
BEGIN;
INSERT INTO queue_items (task_type, payload) VALUES ('confirm_order', '{"order":7}');
COMMIT;

-- Pause everything (the kill switch), then resume:
INSERT INTO scheduler_meta (key, value) VALUES ('semaphore', 'red') ON CONFLICT (key) DO UPDATE SET value = 'red';
UPDATE scheduler_meta SET value = 'green' WHERE key = 'semaphore';
