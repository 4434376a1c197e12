
      -- A waiting item keeps its group (0021's group_key) and enters the queue in it: a flow's steps obey their task
      -- type's limits per group like any other item. Release as 0020's, with the group copied.
      ALTER TABLE {{schema}}.queue_waiting ADD COLUMN IF NOT EXISTS group_key text;

      CREATE OR REPLACE FUNCTION {{schema}}.kairos_flow_release(p_ids bigint[]) RETURNS void LANGUAGE plpgsql AS $fn$
      BEGIN
        WITH moved AS (
          DELETE FROM {{schema}}.queue_waiting w
          WHERE w.id = ANY(p_ids) AND w.remaining <= 0 AND w.blocked_by IS NULL
          RETURNING w.*
        )
        INSERT INTO {{schema}}.queue_items (id, task_type, payload, priority, max_runs, thread, run_after,
          retry_attempts, retry_backoff_ms, retry_exponential, retry_max_backoff_ms, created_at, updated_at, linked,
          group_key, unique_key, inputs)
        SELECT m.id, m.task_type, m.payload, m.priority, m.max_runs, m.thread, m.run_after, m.retry_attempts,
          m.retry_backoff_ms, m.retry_exponential, m.retry_max_backoff_ms, m.created_at, now(), true, m.group_key,
          -- The claim returns unique_key: it tells the runner that this item has inputs to read.
          CASE WHEN cardinality(m.after) > 0 THEN 'kairos:after:' || m.id END,
          CASE WHEN cardinality(m.after) > 0 THEN (
            SELECT jsonb_object_agg(coalesce(m.after_keys[k.n], m.after[k.n]::text), coalesce(o.output, 'null'::jsonb))
            FROM generate_subscripts(m.after, 1) AS k(n)
            LEFT JOIN LATERAL (
              SELECT p.output FROM {{schema}}.processed_items p
              WHERE p.queue_item_id = m.after[k.n] AND p.status = 'ok' ORDER BY p.id DESC LIMIT 1
            ) o ON true) END
        FROM moved m ORDER BY m.id;
      END
      $fn$;
