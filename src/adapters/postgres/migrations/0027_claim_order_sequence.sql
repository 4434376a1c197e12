
      -- A repeating item claimed beside others takes its next place in the queue in claim order (NOTES.md, 0027).
      -- kairos_claim (0016) and kairos_claim_items (0025) drew it in the UPDATE, in the order the UPDATE's join read
      -- the rows: a merge or hash join reads them by id, and two repeating items of equal priority claimed together
      -- could swap places. Nothing else changes.

    CREATE OR REPLACE FUNCTION {{schema}}.kairos_claim(
      p_types text[], p_limit int, p_owner text, p_now timestamptz, p_lease_until timestamptz,
      p_repeat_after timestamptz,
      p_row_leases boolean
    ) RETURNS TABLE (
      id bigint, task_type text, payload text, status text, priority int, max_runs int, thread int,
      runs_done int, runs_started int, run_after timestamptz, created_at timestamptz, updated_at timestamptz,
      in_flight int, seq bigint, unique_key text, lease_id bigint, token text, attempt int
    ) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET jit = off SET enable_seqscan = off AS $fn$
    #variable_conflict use_column
    BEGIN
      RETURN QUERY
      WITH cand AS (
        SELECT c.* FROM unnest(p_types) AS t(task_type)
        CROSS JOIN LATERAL (
          SELECT i.id, i.task_type, i.payload, i.status, i.priority, i.max_runs, i.thread, i.runs_done, i.runs_started, i.run_after, i.created_at, i.updated_at, i.in_flight, i.seq, i.unique_key FROM {{schema}}.queue_items i
          WHERE i.task_type = t.task_type AND i.thread = 1
            AND (i.in_flight = 0 OR (i.thread = 1 AND (i.max_runs = -1 OR i.in_flight < i.max_runs)))
            AND coalesce(i.run_after, '-infinity'::timestamptz) <= p_now
          ORDER BY i.priority DESC, i.seq LIMIT p_limit
          FOR UPDATE SKIP LOCKED
        ) c
        UNION ALL
        SELECT c.* FROM (
          SELECT t.task_type FROM unnest(p_types) AS t(task_type)
          WHERE NOT EXISTS (
            SELECT 1 FROM {{schema}}.queue_items b
            WHERE b.task_type = t.task_type AND b.status = 'processing' AND b.thread = 0
          ) AND pg_try_advisory_xact_lock(hashtext('kairos.seq.{{schema_text}}.' || t.task_type))
        ) t
        CROSS JOIN LATERAL (
          SELECT i.id, i.task_type, i.payload, i.status, i.priority, i.max_runs, i.thread, i.runs_done, i.runs_started, i.run_after, i.created_at, i.updated_at, i.in_flight, i.seq, i.unique_key FROM {{schema}}.queue_items i
          WHERE i.task_type = t.task_type AND i.thread = 0 AND i.in_flight = 0
            AND coalesce(i.run_after, '-infinity'::timestamptz) <= p_now
          ORDER BY i.priority DESC, i.seq LIMIT 1
          FOR UPDATE SKIP LOCKED
        ) c
      ), ranked AS (
        SELECT w.*, sum(w.want) OVER (ORDER BY w.priority DESC, w.seq, w.id ROWS UNBOUNDED PRECEDING) AS upto
        FROM (
          SELECT c.*, CASE WHEN c.thread = 0 OR c.max_runs = -1 THEN 1 ELSE c.max_runs - c.in_flight END AS want
          FROM cand c
        ) w
        WHERE w.want > 0
      ), planned AS (
        -- A repeating item's next place in the queue, drawn here in claim order (a target list's volatile function is
        -- evaluated after its ORDER BY), not by the UPDATE below in whatever order its join reads the rows.
        SELECT r.*, least(r.want, p_limit - (r.upto - r.want))::int AS n,
          CASE WHEN r.max_runs = -1 THEN nextval('{{schema_text}}.queue_items_seq'::regclass) END AS next_seq
        FROM ranked r
        WHERE r.upto - r.want < p_limit
        ORDER BY r.priority DESC, r.seq, r.id
      ), updated AS (
        UPDATE {{schema}}.queue_items i SET in_flight = i.in_flight + p.n, runs_started = i.runs_started + p.n,
          status = 'processing', updated_at = p_now,
          run_after = CASE WHEN i.max_runs = -1 THEN p_repeat_after ELSE i.run_after END,
          seq = coalesce(p.next_seq, i.seq),
          lease_token = CASE WHEN p_row_leases AND i.max_runs = 1 THEN to_hex((random() * 4503599627370496)::bigint) ELSE i.lease_token END,
          lease_owner = CASE WHEN p_row_leases AND i.max_runs = 1 THEN p_owner ELSE i.lease_owner END,
          lease_until = CASE WHEN p_row_leases AND i.max_runs = 1 THEN p_lease_until ELSE i.lease_until END
        FROM unnest(ARRAY(SELECT pl.id FROM planned pl), ARRAY(SELECT pl.n FROM planned pl),
          ARRAY(SELECT pl.next_seq FROM planned pl)) AS p(id, n, next_seq)
        WHERE i.id = p.id
        RETURNING i.id, i.lease_token, i.runs_started, p_row_leases AND i.max_runs = 1 AS row_leased
      ), leased AS (
        INSERT INTO {{schema}}.queue_leases AS q (item_id, token, owner, started_at, lease_until, attempt)
        SELECT p.id, to_hex((random() * 4503599627370496)::bigint), p_owner, p_now, p_lease_until, p.runs_started + g.k
        FROM planned p CROSS JOIN LATERAL generate_series(1, p.n) AS g(k)
        WHERE NOT (p_row_leases AND p.max_runs = 1)
        RETURNING q.id, q.item_id, q.token, q.attempt
      )
      SELECT p.id, p.task_type, p.payload, p.status, p.priority, p.max_runs, p.thread, p.runs_done,
        p.runs_started, p.run_after, p.created_at, p.updated_at, p.in_flight, p.seq, p.unique_key, l.id, l.token,
        l.attempt
      FROM leased l JOIN planned p ON p.id = l.item_id
      UNION ALL
      SELECT p.id, p.task_type, p.payload, p.status, p.priority, p.max_runs, p.thread, p.runs_done,
        p.runs_started, p.run_after, p.created_at, p.updated_at, p.in_flight, p.seq, p.unique_key, -u.id, u.lease_token,
        u.runs_started
      FROM updated u JOIN planned p ON p.id = u.id WHERE u.row_leased
      ORDER BY 5 DESC, 14, 16;
    END
    $fn$;

      CREATE OR REPLACE FUNCTION {{schema}}.kairos_claim_items(
        p_ids bigint[], p_owner text, p_now timestamptz, p_lease_until timestamptz, p_repeat_after timestamptz
      ) RETURNS TABLE (
        id bigint, task_type text, payload text, status text, priority int, max_runs int, thread int,
        runs_done int, runs_started int, run_after timestamptz, created_at timestamptz, updated_at timestamptz,
        in_flight int, seq bigint, unique_key text, lease_id bigint, token text, attempt int
      ) LANGUAGE plpgsql SET jit = off SET enable_seqscan = off AS $fn$
      #variable_conflict use_column
      BEGIN
        -- (PL/pgSQL, not SQL: its plan is kept for the session, where a SQL function's is made again at each call.)
        RETURN QUERY WITH c AS (
          -- (= ANY, not a join with unnest: on a table without statistics the planner may join by scanning the
          -- whole primary key.)
          SELECT i.*, array_position(p_ids, i.id) AS n, to_hex((random() * 4503599627370496)::bigint) AS new_token
          FROM {{schema}}.queue_items i
          WHERE i.id = ANY(p_ids)
            AND (i.in_flight = 0 OR (i.thread = 1 AND (i.max_runs = -1 OR i.in_flight < i.max_runs)))
          FOR UPDATE OF i SKIP LOCKED
        ), next_seq AS (
          -- A repeating item's next place in the queue, drawn in the list's order (see kairos_claim).
          SELECT c.id, nextval('{{schema_text}}.queue_items_seq'::regclass) AS seq FROM c WHERE c.max_runs = -1
          ORDER BY c.n
        ), once AS (
          -- A run-once item's execution holds its lease on the item row (0014).
          UPDATE {{schema}}.queue_items i SET in_flight = i.in_flight + 1, runs_started = i.runs_started + 1,
            status = 'processing', updated_at = p_now,
            lease_token = c.new_token, lease_owner = p_owner, lease_until = p_lease_until
          FROM c WHERE i.id = c.id AND c.max_runs = 1 AND c.in_flight = 0
          RETURNING i.id
        ), many AS (
          UPDATE {{schema}}.queue_items i SET in_flight = i.in_flight + 1, runs_started = i.runs_started + 1,
            status = 'processing', updated_at = p_now,
            run_after = CASE WHEN i.max_runs = -1 THEN p_repeat_after ELSE i.run_after END,
            seq = coalesce(s.seq, i.seq)
          FROM c LEFT JOIN next_seq s ON s.id = c.id WHERE i.id = c.id AND NOT (c.max_runs = 1 AND c.in_flight = 0)
          RETURNING i.id
        ), leases AS (
          INSERT INTO {{schema}}.queue_leases AS q (item_id, token, owner, started_at, lease_until, attempt)
          SELECT c.id, c.new_token, p_owner, p_now, p_lease_until, c.runs_started + 1 FROM c JOIN many ON many.id = c.id
          RETURNING q.id, q.item_id
        )
        SELECT c.id, c.task_type, c.payload, c.status, c.priority, c.max_runs, c.thread, c.runs_done, c.runs_started,
          c.run_after, c.created_at, c.updated_at, c.in_flight, c.seq, c.unique_key,
          coalesce(-o.id, l.id), c.new_token, c.runs_started + 1
        FROM c LEFT JOIN once o ON o.id = c.id LEFT JOIN leases l ON l.item_id = c.id
        WHERE o.id IS NOT NULL OR l.id IS NOT NULL
        ORDER BY c.n;
      END
      $fn$;
