ALTER TABLE {{schema}}.queue_items
      ADD COLUMN retry_attempts int,
      ADD COLUMN retry_backoff_ms bigint,
      ADD COLUMN retry_exponential boolean,
      ADD COLUMN retry_max_backoff_ms bigint,
      ADD COLUMN failures int NOT NULL DEFAULT 0;
ALTER TABLE {{schema}}.queue_items
      ADD CONSTRAINT queue_items_retry_attempts_from_1_to_1000 CHECK (retry_attempts BETWEEN 1 AND 1000),
      ADD CONSTRAINT queue_items_retry_backoff_from_0_to_a_year
        CHECK (retry_backoff_ms BETWEEN 0 AND 31622400000
          AND retry_max_backoff_ms BETWEEN 0 AND 31622400000),
      ADD CONSTRAINT queue_items_failures_not_negative CHECK (failures >= 0);

      CREATE FUNCTION {{schema}}.kairos_retry_delay_ms(base bigint, exponential boolean, max_ms bigint, failures_before int)
      RETURNS double precision LANGUAGE sql IMMUTABLE AS $fn$
        SELECT CASE WHEN exponential THEN least(max_ms, base * power(2, least(failures_before, 40))) ELSE base END
      $fn$;

      CREATE FUNCTION {{schema}}.kairos_retry_policy(
        item_attempts int, item_backoff_ms bigint, item_exponential boolean, item_max_backoff_ms bigint,
        type_attempts int, type_backoff_ms bigint, type_exponential boolean, type_max_backoff_ms bigint,
        OUT attempts int, OUT backoff_ms bigint, OUT exponential boolean, OUT max_backoff_ms bigint
      ) LANGUAGE sql IMMUTABLE AS $fn$
        SELECT CASE WHEN item_attempts IS NULL THEN type_attempts ELSE item_attempts END,
          CASE WHEN item_attempts IS NULL THEN type_backoff_ms ELSE coalesce(item_backoff_ms, 1000) END,
          e.exp,
          CASE WHEN item_attempts IS NULL THEN type_max_backoff_ms
            ELSE coalesce(item_max_backoff_ms, CASE WHEN e.exp
              THEN greatest(coalesce(item_backoff_ms, 1000), 3600000)
              ELSE coalesce(item_backoff_ms, 1000) END) END
        FROM (SELECT CASE WHEN item_attempts IS NULL THEN type_exponential
          ELSE coalesce(item_exponential, item_backoff_ms IS NULL) END AS exp) e
      $fn$;
DROP FUNCTION {{schema}}.kairos_record_once(bigint[], text[], text[], text[], text[], text[], timestamptz[],
      timestamptz[], int[]);

      CREATE FUNCTION {{schema}}.kairos_record_once(
        p_lease_ids bigint[], p_tokens text[], p_task_types text[], p_payloads text[], p_statuses text[],
        p_errors text[], p_started timestamptz[], p_finished timestamptz[], p_durations int[], p_attempts int[],
        p_backoff_ms bigint[], p_exponential boolean[], p_max_backoff_ms bigint[]
      ) RETURNS SETOF bigint LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET jit = off AS $fn$
      BEGIN
        RETURN QUERY
        WITH input AS (
          SELECT * FROM unnest(
            p_lease_ids, p_tokens, p_task_types, p_payloads, p_statuses, p_errors, p_started, p_finished, p_durations,
            p_attempts, p_backoff_ms, p_exponential, p_max_backoff_ms
          ) AS x(lease_id, token, task_type, payload, status, error_msg, started_at, finished_at, duration_ms,
            attempts, backoff_ms, exponential, max_backoff_ms)
        ), l AS (
          -- The input's columns come back with each lease held: no join of the two afterwards (its planner
          -- estimates, a row or ten for each, made it a nested loop, quadratic in the batch).
          DELETE FROM {{schema}}.queue_leases q USING input x WHERE q.id = x.lease_id AND q.token = x.token
            AND EXISTS (SELECT 1 FROM {{schema}}.queue_items i WHERE i.id = q.item_id)
          RETURNING q.id, q.item_id, x.task_type, x.payload, x.status, x.error_msg, x.started_at, x.finished_at,
            x.duration_ms, x.attempts, x.backoff_ms, x.exponential, x.max_backoff_ms
        ), log AS (
          INSERT INTO {{schema}}.processed_items
            (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
          SELECT l.item_id, l.task_type, l.payload, l.status, l.error_msg, l.started_at, l.finished_at, l.duration_ms
          FROM l
        ), r AS (
          -- Failures with an attempt left, and when they run again. Only failures are looked at: a batch of
          -- successes (the hot path) costs what it did before retries.
          SELECT l.item_id, l.finished_at + {{schema}}.kairos_retry_delay_ms(e.backoff_ms, e.exponential, e.max_backoff_ms,
            i.failures) * interval '1 millisecond' AS retry_at
          FROM l JOIN {{schema}}.queue_items i ON i.id = l.item_id
          CROSS JOIN LATERAL {{schema}}.kairos_retry_policy(i.retry_attempts, i.retry_backoff_ms, i.retry_exponential,
            i.retry_max_backoff_ms, l.attempts, l.backoff_ms, l.exponential, l.max_backoff_ms) AS e
          WHERE l.status = 'error' AND i.failures + 1 < e.attempts
        ), gone AS (
          DELETE FROM {{schema}}.queue_items i USING l
          WHERE i.id = l.item_id AND i.max_runs <= 1 AND i.in_flight <= 1
            AND NOT EXISTS (SELECT 1 FROM r WHERE r.item_id = l.item_id)
        ), kept AS (
          UPDATE {{schema}}.queue_items i SET
            in_flight = greatest(0, i.in_flight - 1),
            max_runs = CASE WHEN i.max_runs = -1 OR r.item_id IS NOT NULL THEN i.max_runs
              ELSE greatest(0, i.max_runs - 1) END,
            runs_done = i.runs_done + 1,
            failures = CASE WHEN r.item_id IS NOT NULL THEN i.failures + 1 ELSE 0 END,
            run_after = coalesce(r.retry_at, i.run_after),
            status = CASE WHEN i.in_flight - 1 > 0 THEN 'processing' ELSE 'pending' END,
            updated_at = now()
          FROM l LEFT JOIN r ON r.item_id = l.item_id
          WHERE i.id = l.item_id AND (r.item_id IS NOT NULL OR NOT (i.max_runs <= 1 AND i.in_flight <= 1))
        )
        SELECT l.id FROM l;
      END
      $fn$;

      CREATE FUNCTION {{schema}}.kairos_record_and_claim(
        p_lease_ids bigint[], p_tokens text[], p_task_types text[], p_payloads text[], p_statuses text[],
        p_errors text[], p_started timestamptz[], p_finished timestamptz[], p_durations int[], p_attempts int[],
        p_backoff_ms bigint[], p_exponential boolean[], p_max_backoff_ms bigint[],
        p_types text[], p_limit int, p_owner text, p_now timestamptz, p_lease_until timestamptz,
        p_repeat_after timestamptz
      ) RETURNS TABLE (
        recorded bigint, id bigint, task_type text, payload text, status text, priority int, max_runs int,
        thread int, runs_done int, runs_started int, run_after timestamptz, created_at timestamptz,
        updated_at timestamptz, in_flight int, seq bigint, unique_key text, lease_id bigint, token text, attempt int
      ) LANGUAGE plpgsql AS $fn$
      BEGIN
        RETURN QUERY SELECT r, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::int, NULL::int, NULL::int,
          NULL::int, NULL::int, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::int, NULL::bigint,
          NULL::text, NULL::bigint, NULL::text, NULL::int
        FROM {{schema}}.kairos_record_once(p_lease_ids, p_tokens, p_task_types, p_payloads, p_statuses, p_errors, p_started,
          p_finished, p_durations, p_attempts, p_backoff_ms, p_exponential, p_max_backoff_ms) AS r;
        RETURN QUERY SELECT NULL::bigint, c.* FROM {{schema}}.kairos_claim(p_types, p_limit, p_owner, p_now, p_lease_until,
          p_repeat_after) AS c;
      END
      $fn$;
