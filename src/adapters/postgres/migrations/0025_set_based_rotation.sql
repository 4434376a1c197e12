
      -- The rotation of a limit per group, set-based (NOTES.md, 0025): 0024's claimed item by item (a statement for
      -- the next group, one for its items, then a claim and a slot per item: 0.62-0.66 of the plain drain through a
      -- runner, 0.75 with this). Here one statement walks the groups and reads their candidates, and one claims them
      -- all, with their slots and window counts. What it claims, and in which order, is 0024's.

      -- 0021's kairos_claim_item for a list of ids, in one statement per kind of lease: each row locked (one that
      -- another transaction holds is skipped) and claimed when it still may run; its row before the claim, as
      -- kairos_claim_item returns it, in the list's order.
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
            seq = CASE WHEN i.max_runs = -1 THEN nextval('{{schema_text}}.queue_items_seq'::regclass) ELSE i.seq END
          FROM c WHERE i.id = c.id AND NOT (c.max_runs = 1 AND c.in_flight = 0)
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

      -- As 0024's, the rotation set-based (above).
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_claim_limited(
        p_types text[], p_limit int, p_owner text, p_now timestamptz, p_lease_until timestamptz,
        p_repeat_after timestamptz
      ) RETURNS TABLE (
        id bigint, task_type text, payload text, status text, priority int, max_runs int, thread int,
        runs_done int, runs_started int, run_after timestamptz, created_at timestamptz, updated_at timestamptz,
        in_flight int, seq bigint, unique_key text, lease_id bigint, token text, attempt int
      ) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET jit = off SET enable_seqscan = off AS $fn$
      #variable_conflict use_column
      DECLARE
        v_type text;
        v_left int := p_limit;
        v_budget int;
        v_lim {{schema}}.queue_limits%ROWTYPE;
        v_grouped boolean;
        v_state {{schema}}.kairos_limit_state%ROWTYPE;
        v_clock timestamptz;
        v_window timestamptz;
        v_used int;
        v_held int;
        v_held_by jsonb;
        v_n int;
        v_taken int;
        v_seq_busy boolean;
        v_start text;
        v_cursor text;
        v_wrapped boolean;
        v_steps int;
        v_g text;
        v_room int;
        v_group_used int;
        v_group_taken int;
        v_ordered boolean;
        v_pass int;
        v_lo text;
        v_hi text;
        v_max_steps int;
        v_ids bigint[];
        v_keys text[];
        v_rows refcursor;
        r record;
      BEGIN
        FOR v_type IN SELECT DISTINCT t FROM unnest(p_types) AS t ORDER BY 1 LOOP
          EXIT WHEN v_left <= 0;
          PERFORM pg_advisory_xact_lock(hashtext('kairos.lim.{{schema_text}}.' || v_type));
          SELECT l.* INTO v_lim FROM {{schema}}.queue_limits l WHERE l.task_type = v_type;
          IF NOT FOUND THEN
            -- Cleared meanwhile: the plain claim.
            RETURN QUERY SELECT * FROM {{schema}}.kairos_claim(ARRAY[v_type], v_left, p_owner, p_now, p_lease_until,
              p_repeat_after, true);
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_left := v_left - v_n;
            CONTINUE;
          END IF;
          v_budget := v_left;
          -- Served group by group when either bound is per group.
          v_grouped := v_lim.per_group OR v_lim.rate_per_group;
          SELECT s.* INTO v_state FROM {{schema}}.kairos_limit_state s WHERE s.task_type = v_type;
          v_used := 0;
          IF v_lim.rate IS NOT NULL THEN
            -- Fixed windows of rate_per_ms from the epoch, by the database's clock: every process counts the same.
            v_clock := clock_timestamp();
            v_window := to_timestamp(floor(extract(epoch FROM v_clock) * 1000 / v_lim.rate_per_ms)
              * v_lim.rate_per_ms / 1000.0);
            IF v_state.window_start IS NOT DISTINCT FROM v_window THEN
              v_used := v_state.window_starts;
            END IF;
            IF NOT v_lim.rate_per_group THEN
              v_budget := least(v_budget, v_lim.rate - v_used);
            ELSIF v_state.window_start IS DISTINCT FROM v_window THEN
              -- The first claim of a new window: the groups' counts of the windows before it go.
              DELETE FROM {{schema}}.kairos_limit_group_windows w
              WHERE w.task_type = v_type AND w.window_start <> v_window;
            END IF;
          END IF;
          IF v_lim.concurrency IS NOT NULL THEN
            -- The type's slots whose lease no longer lives (finished, cancelled, or expired: a dead holder's slot is
            -- free once its lease has expired, before any rescue) go; the rest are counted.
            DELETE FROM {{schema}}.kairos_limit_slots s WHERE s.task_type = v_type AND NOT (CASE WHEN s.lease_id < 0
              THEN EXISTS (SELECT 1 FROM {{schema}}.queue_items i
                WHERE i.id = -s.lease_id AND i.lease_token = s.token AND i.lease_until >= p_now)
              ELSE EXISTS (SELECT 1 FROM {{schema}}.queue_leases q
                WHERE q.id = s.lease_id AND q.token = s.token AND q.lease_until >= p_now) END);
            IF v_lim.per_group THEN
              SELECT coalesce(jsonb_object_agg(h.group_key, h.n), '{}'::jsonb) INTO v_held_by FROM (
                SELECT s.group_key, count(*) AS n FROM {{schema}}.kairos_limit_slots s
                WHERE s.task_type = v_type AND s.group_key IS NOT NULL GROUP BY s.group_key
              ) h;
            ELSE
              SELECT count(*) INTO v_held FROM {{schema}}.kairos_limit_slots s WHERE s.task_type = v_type;
              v_budget := least(v_budget, v_lim.concurrency - v_held);
            END IF;
          END IF;
          CONTINUE WHEN v_budget <= 0;
          v_taken := 0;
          IF NOT v_grouped THEN
            RETURN QUERY WITH claimed AS (
              SELECT * FROM {{schema}}.kairos_claim(ARRAY[v_type], v_budget, p_owner, p_now, p_lease_until,
                p_repeat_after, true)
            ), slot AS (
              INSERT INTO {{schema}}.kairos_limit_slots (task_type, lease_id, token)
              SELECT v_type, claimed.lease_id, claimed.token FROM claimed WHERE v_lim.concurrency IS NOT NULL
            )
            SELECT * FROM claimed;
            GET DIAGNOSTICS v_taken = ROW_COUNT;
          ELSE
            v_seq_busy := EXISTS (SELECT 1 FROM {{schema}}.queue_items b
              WHERE b.task_type = v_type AND b.status = 'processing' AND b.thread = 0);
            -- 1 per group: only a group's head (in queue order, whatever its state) may start; a head that runs
            -- (or whose dead holder's execution is not yet taken back), or waits for its time (a retry's backoff),
            -- holds the group.
            v_ordered := v_lim.per_group AND v_lim.concurrency = 1;
            -- The rotation: groups in key order from after the one looked at last, round to where it began, each
            -- offered its room; at most a bounded number of groups looked at per claim. Set-based: one statement
            -- walks the groups (a skip scan of queue_items_groups) and reads each one's candidates, pulled only as
            -- far as the budget needs; the candidates are claimed together below. Pass 1 runs from after the
            -- cursor to the last group, pass 2 from the first group to the cursor.
            v_start := v_state.group_cursor;
            v_cursor := v_start;
            v_steps := 0;
            v_max_steps := 4 * v_budget + 256;
            v_ids := '{}';
            v_keys := '{}';
            FOR v_pass IN 1..2 LOOP
              EXIT WHEN v_pass = 2 AND v_start IS NULL;
              EXIT WHEN cardinality(v_ids) >= v_budget OR v_steps >= v_max_steps;
              v_lo := CASE WHEN v_pass = 1 THEN v_start END;
              v_hi := CASE WHEN v_pass = 2 THEN v_start END;
              -- Row by row from a cursor: a FOR loop over a query would fetch ten rows at a time, reading groups
              -- (and their candidates) well past what a small claim needs.
              OPEN v_rows FOR
                WITH RECURSIVE g(k, n) AS (
                  -- (Two subqueries: an OR of the two would not bound the generic plan's index scan.)
                  SELECT CASE WHEN v_lo IS NULL
                    THEN (SELECT i.group_key FROM {{schema}}.queue_items i
                          WHERE i.task_type = v_type AND i.group_key IS NOT NULL ORDER BY i.group_key LIMIT 1)
                    ELSE (SELECT i.group_key FROM {{schema}}.queue_items i
                          WHERE i.task_type = v_type AND i.group_key > v_lo ORDER BY i.group_key LIMIT 1)
                  END, 1
                  UNION ALL
                  SELECT (SELECT i.group_key FROM {{schema}}.queue_items i
                          WHERE i.task_type = v_type AND i.group_key > g.k ORDER BY i.group_key LIMIT 1), g.n + 1
                  FROM g WHERE g.k IS NOT NULL AND (v_hi IS NULL OR g.k < v_hi) AND g.n < v_max_steps - v_steps
                )
                SELECT g.k, h.id, h.thread, h.in_flight, h.run_after, h.room FROM g
                LEFT JOIN LATERAL (
                  SELECT i.id, i.thread, i.in_flight, i.run_after, x.room FROM (
                    SELECT least(
                      CASE WHEN v_lim.per_group THEN v_lim.concurrency - coalesce((v_held_by ->> g.k)::int, 0)
                        ELSE v_budget END,
                      CASE WHEN v_lim.rate_per_group THEN v_lim.rate - coalesce((SELECT w.starts
                        FROM {{schema}}.kairos_limit_group_windows w
                        WHERE w.task_type = v_type AND w.group_key = g.k AND w.window_start = v_window), 0)
                        ELSE v_budget END) AS room
                  ) x
                  CROSS JOIN LATERAL (
                    SELECT i.id, i.thread, i.in_flight, i.run_after FROM {{schema}}.queue_items i
                    WHERE i.task_type = v_type AND i.group_key = g.k
                      AND (v_ordered OR (i.in_flight = 0 AND coalesce(i.run_after, '-infinity'::timestamptz) <= p_now))
                    ORDER BY i.priority DESC, i.seq
                    LIMIT CASE WHEN x.room <= 0 THEN 0 WHEN v_ordered THEN 1 ELSE x.room END
                  ) i
                ) h ON true
                WHERE g.k IS NOT NULL AND (v_hi IS NULL OR g.k <= v_hi);
              LOOP
                EXIT WHEN cardinality(v_ids) >= v_budget;
                FETCH v_rows INTO r;
                EXIT WHEN NOT FOUND;
                IF r.k IS DISTINCT FROM v_cursor THEN
                  v_steps := v_steps + 1;
                  v_cursor := r.k;
                END IF;
                CONTINUE WHEN r.id IS NULL;
                CONTINUE WHEN v_ordered AND (r.in_flight > 0
                  OR coalesce(r.run_after, '-infinity'::timestamptz) > p_now);
                CONTINUE WHEN r.thread = 0 AND v_seq_busy;
                v_seq_busy := v_seq_busy OR r.thread = 0;
                v_ids := v_ids || r.id;
                v_keys := v_keys || r.k;
              END LOOP;
              CLOSE v_rows;
            END LOOP;
            IF cardinality(v_ids) > 0 THEN
              -- Claimed together (each row locked, skipped when another holds it), each with its slot, and each
              -- group's starts counted in the window.
              RETURN QUERY WITH x AS (
                SELECT * FROM {{schema}}.kairos_claim_items(v_ids, p_owner, p_now, p_lease_until, p_repeat_after)
              ), k AS (
                SELECT x.lease_id, x.token, g.key FROM x
                JOIN unnest(v_ids, v_keys) AS g(id, key) ON g.id = x.id
              ), slot AS (
                INSERT INTO {{schema}}.kairos_limit_slots (task_type, lease_id, token, group_key)
                SELECT v_type, k.lease_id, k.token, k.key FROM k WHERE v_lim.concurrency IS NOT NULL
              ), win AS (
                INSERT INTO {{schema}}.kairos_limit_group_windows AS w (task_type, group_key, window_start, starts)
                SELECT v_type, k.key, v_window, count(*)::int FROM k WHERE v_lim.rate_per_group GROUP BY k.key
                ON CONFLICT ON CONSTRAINT kairos_limit_group_windows_pkey DO UPDATE SET
                  starts = CASE WHEN w.window_start = EXCLUDED.window_start THEN w.starts + EXCLUDED.starts
                    ELSE EXCLUDED.starts END,
                  window_start = EXCLUDED.window_start
              )
              SELECT * FROM x;
              GET DIAGNOSTICS v_taken = ROW_COUNT;
            END IF;
          END IF;
          v_left := v_left - v_taken;
          IF v_grouped OR (v_lim.rate IS NOT NULL AND v_taken > 0) THEN
            INSERT INTO {{schema}}.kairos_limit_state AS s (task_type, window_start, window_starts, group_cursor)
            VALUES (v_type, v_window, v_used + v_taken, CASE WHEN v_grouped THEN v_cursor END)
            ON CONFLICT ON CONSTRAINT kairos_limit_state_pkey DO UPDATE SET
              window_start = CASE WHEN v_lim.rate IS NOT NULL THEN v_window ELSE s.window_start END,
              window_starts = CASE WHEN v_lim.rate IS NOT NULL THEN v_used + v_taken ELSE s.window_starts END,
              group_cursor = CASE WHEN v_grouped THEN v_cursor ELSE s.group_cursor END;
          END IF;
        END LOOP;
      END
      $fn$;
