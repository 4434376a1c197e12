
      -- The claim of a limited type with a shorter critical section (NOTES.md, 0026): everything it does runs under
      -- the type's lock, held to commit, so claims of one type follow one another; the fewer statements under it, the
      -- more claims a second. The slot sweep and the count of what is held are one statement that reads only live
      -- index entries (kairos_limit_held, below), and whether a sequential item of the type runs is asked only when a
      -- candidate is sequential. What is claimed, and in which order, is 0025's.

      -- What a type's slots hold, in all and per group, its dead slots swept on the way: the slots whose lease no
      -- longer lives (finished, cancelled, or expired: a dead holder's slot is free once its lease has expired, before
      -- any rescue) go, the rest are counted. One pass over the type's slots, each lease looked up once. Run under the
      -- type's lock (kairos_claim_limited). The slots churn (a row in and out per execution), so their primary key
      -- holds far more dead entries than live ones between vacuums: an index scan, unlike a bitmap scan, marks the
      -- dead ones it meets so that the next claim skips them (0021's sweep read 3,500 entries for 20 slots). The
      -- dead slots go by their ctid, without a second scan.
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_limit_held(p_type text, p_now timestamptz, OUT held int,
        OUT held_by jsonb)
      LANGUAGE plpgsql SET jit = off SET enable_seqscan = off SET enable_bitmapscan = off AS $fn$
      BEGIN
        WITH s AS (
          -- Each lease found by its id. (IS TRUE: not a condition an index on lease_until can take; IS NOT DISTINCT
          -- FROM, the same as = for a slot's token, which is never null, but not enough for the planner to use the
          -- partial index of leased items, which it would read whole for each slot.)
          SELECT s.ctid AS tid, s.group_key, CASE WHEN s.lease_id < 0
            THEN EXISTS (SELECT 1 FROM {{schema}}.queue_items i
              WHERE i.id = -s.lease_id AND i.lease_token IS NOT DISTINCT FROM s.token
                AND (i.lease_until >= p_now) IS TRUE)
            ELSE EXISTS (SELECT 1 FROM {{schema}}.queue_leases q
              WHERE q.id = s.lease_id AND q.token = s.token AND (q.lease_until >= p_now) IS TRUE) END AS live
          FROM {{schema}}.kairos_limit_slots s WHERE s.task_type = p_type
        ), gone AS (
          DELETE FROM {{schema}}.kairos_limit_slots d WHERE d.ctid = ANY (ARRAY(SELECT s.tid FROM s WHERE NOT s.live))
        )
        SELECT coalesce(sum(h.n), 0)::int,
          coalesce(jsonb_object_agg(h.group_key, h.n) FILTER (WHERE h.group_key IS NOT NULL), '{}'::jsonb)
        INTO held, held_by
        FROM (SELECT s.group_key, count(*) AS n FROM s WHERE s.live GROUP BY s.group_key) h;
      END
      $fn$;

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
            -- The slots still held (dead ones swept), the type's and each group's.
            SELECT h.held, h.held_by INTO v_held, v_held_by FROM {{schema}}.kairos_limit_held(v_type, p_now) h;
            IF NOT v_lim.per_group THEN
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
            -- Whether a sequential item of the type runs: asked at the first sequential candidate.
            v_seq_busy := NULL;
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
                IF r.thread = 0 THEN
                  IF v_seq_busy IS NULL THEN
                    v_seq_busy := EXISTS (SELECT 1 FROM {{schema}}.queue_items b
                      WHERE b.task_type = v_type AND b.status = 'processing' AND b.thread = 0);
                  END IF;
                  CONTINUE WHEN v_seq_busy;
                  v_seq_busy := true;
                END IF;
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
