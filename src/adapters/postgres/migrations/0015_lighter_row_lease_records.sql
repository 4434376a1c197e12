
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_record_row_leases(
        p_lease_ids bigint[], p_tokens text[], p_statuses text[], p_errors text[], p_started timestamptz[],
        p_finished timestamptz[], p_durations int[], p_attempts int[], p_backoff_ms bigint[], p_exponential boolean[],
        p_max_backoff_ms bigint[]
      ) RETURNS SETOF bigint LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET jit = off AS $fn$
      BEGIN
        RETURN QUERY
        WITH input AS (
          SELECT * FROM unnest(
            p_lease_ids, p_tokens, p_statuses, p_errors, p_started, p_finished, p_durations, p_attempts, p_backoff_ms,
            p_exponential, p_max_backoff_ms
          ) AS x(lease_id, token, status, error_msg, started_at, finished_at, duration_ms, attempts, backoff_ms,
            exponential, max_backoff_ms)
        ), r AS (
          -- Failures with an attempt left, and when they run again. Only failures are looked at.
          SELECT i.id AS item_id, x.finished_at + {{schema}}.kairos_retry_delay_ms(e.backoff_ms, e.exponential,
            e.max_backoff_ms, i.failures) * interval '1 millisecond' AS retry_at
          FROM input x JOIN {{schema}}.queue_items i ON i.id = -x.lease_id AND i.lease_token = x.token
          CROSS JOIN LATERAL {{schema}}.kairos_retry_policy(i.retry_attempts, i.retry_backoff_ms, i.retry_exponential,
            i.retry_max_backoff_ms, x.attempts, x.backoff_ms, x.exponential, x.max_backoff_ms) AS e
          WHERE x.status = 'error' AND i.failures + 1 < e.attempts
        ), gone AS (
          DELETE FROM {{schema}}.queue_items i USING input x
          WHERE i.id = -x.lease_id AND i.lease_token = x.token AND i.max_runs <= 1 AND i.in_flight <= 1
            AND NOT EXISTS (SELECT 1 FROM r WHERE r.item_id = i.id)
          RETURNING x.lease_id, i.id AS item_id, i.task_type, i.payload, x.status, x.error_msg, x.started_at,
            x.finished_at, x.duration_ms
        ), kept AS (
          UPDATE {{schema}}.queue_items i SET
            in_flight = greatest(0, i.in_flight - 1),
            max_runs = CASE WHEN i.max_runs = -1 OR r.item_id IS NOT NULL THEN i.max_runs
              ELSE greatest(0, i.max_runs - 1) END,
            runs_done = i.runs_done + 1,
            failures = CASE WHEN r.item_id IS NOT NULL THEN i.failures + 1 ELSE 0 END,
            run_after = coalesce(r.retry_at, i.run_after),
            status = CASE WHEN i.in_flight - 1 > 0 THEN 'processing' ELSE 'pending' END,
            lease_token = NULL, lease_owner = NULL, lease_until = NULL,
            updated_at = now()
          FROM (SELECT * FROM input y WHERE NOT EXISTS (SELECT 1 FROM gone g WHERE g.lease_id = y.lease_id)) x LEFT JOIN r ON r.item_id = -x.lease_id
          WHERE i.id = -x.lease_id AND i.lease_token = x.token
            AND (r.item_id IS NOT NULL OR NOT (i.max_runs <= 1 AND i.in_flight <= 1))
          RETURNING x.lease_id, i.id AS item_id, i.task_type, i.payload, x.status, x.error_msg, x.started_at,
            x.finished_at, x.duration_ms
        ), l AS (
          SELECT * FROM gone UNION ALL SELECT * FROM kept
        ), log AS (
          INSERT INTO {{schema}}.processed_items
            (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
          SELECT l.item_id, l.task_type, l.payload, l.status, l.error_msg, l.started_at, l.finished_at, l.duration_ms
          FROM l
        )
        SELECT l.lease_id FROM l;
      END
      $fn$;
