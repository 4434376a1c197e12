
      -- A rate per group (issue 36): rate_per_group makes the rate bound each group's starts per window, apart from
      -- per_group, which keeps its meaning (the concurrency is each group's). So a limit stored before this one
      -- (per_group with a concurrency and a rate: the concurrency per group, the rate for the whole type) keeps its
      -- meaning, and the four combinations of a concurrency and a rate, each for the type or per group, can be written.
      -- (Written to run again over itself, as the others: a schema whose row of this migration is gone.)
      ALTER TABLE {{schema}}.queue_limits ADD COLUMN IF NOT EXISTS rate_per_group boolean NOT NULL DEFAULT false;
      ALTER TABLE {{schema}}.queue_limits DROP CONSTRAINT IF EXISTS queue_limits_group_rate_needs_rate;
      ALTER TABLE {{schema}}.queue_limits ADD CONSTRAINT queue_limits_group_rate_needs_rate
        CHECK (NOT rate_per_group OR rate IS NOT NULL);

      -- Written by claims only: each group's starts in the type's current rate window. The first claim of a new
      -- window drops the rows of the windows before it, so the table holds only the groups that started in the
      -- current window of each type.
      CREATE TABLE IF NOT EXISTS {{schema}}.kairos_limit_group_windows (
        task_type    text NOT NULL,
        group_key    text NOT NULL,
        window_start timestamptz NOT NULL,
        starts       int NOT NULL,
        PRIMARY KEY (task_type, group_key)
      );

      -- 0021's claim of limited types, with the rate per group: a type whose concurrency or rate is per group is
      -- served in the rotation, each group offered the least of its concurrency room (the type's budget left when the
      -- concurrency is the type's, or absent) and, with rate_per_group, what is left of its rate in the window. A
      -- concurrency or rate of the whole type bounds the claim's budget, as in 0021; under rate_per_group the type's
      -- own count (kairos_limit_state.window_starts) is kept but does not bound. The plain claim and the types
      -- without a rate per group run as before.
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
        c {{schema}}.queue_items%ROWTYPE;
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
            -- The rotation: groups in key order from after the one served last, round to where it began, each
            -- offered its room; at most a bounded number of groups looked at per claim (the busy ones are skipped,
            -- and there are at most as many as executions run).
            v_start := v_state.group_cursor;
            v_cursor := v_start;
            v_wrapped := false;
            v_steps := 0;
            LOOP
              EXIT WHEN v_taken >= v_budget OR v_steps >= 4 * v_budget + 256;
              v_steps := v_steps + 1;
              -- (Two statements: an OR of the two would not bound the generic plan's index scan.)
              IF v_cursor IS NULL THEN
                SELECT i.group_key INTO v_g FROM {{schema}}.queue_items i
                WHERE i.task_type = v_type AND i.group_key IS NOT NULL
                ORDER BY i.group_key LIMIT 1;
              ELSE
                SELECT i.group_key INTO v_g FROM {{schema}}.queue_items i
                WHERE i.task_type = v_type AND i.group_key > v_cursor
                ORDER BY i.group_key LIMIT 1;
              END IF;
              IF NOT FOUND THEN
                EXIT WHEN v_wrapped OR v_start IS NULL;
                v_wrapped := true;
                v_cursor := NULL;
                CONTINUE;
              END IF;
              EXIT WHEN v_wrapped AND v_g > v_start;
              v_cursor := v_g;
              v_room := CASE WHEN v_lim.per_group THEN v_lim.concurrency - coalesce((v_held_by ->> v_g)::int, 0)
                ELSE v_budget - v_taken END;
              IF v_lim.rate_per_group THEN
                -- The group's starts in this window (SELECT INTO leaves NULL when it has none yet).
                SELECT w.starts INTO v_group_used FROM {{schema}}.kairos_limit_group_windows w
                WHERE w.task_type = v_type AND w.group_key = v_g AND w.window_start = v_window;
                v_room := least(v_room, v_lim.rate - coalesce(v_group_used, 0));
              END IF;
              CONTINUE WHEN v_room <= 0;
              v_group_taken := v_taken;
              IF v_lim.per_group AND v_lim.concurrency = 1 THEN
                -- Ordered: only the group's head (in queue order, whatever its state) may start. A head that runs
                -- (or whose dead holder's execution is not yet taken back), or waits for its time (a retry's
                -- backoff), holds the group.
                SELECT i.* INTO c FROM {{schema}}.queue_items i
                WHERE i.task_type = v_type AND i.group_key = v_g ORDER BY i.priority DESC, i.seq LIMIT 1;
                CONTINUE WHEN c.in_flight > 0 OR coalesce(c.run_after, '-infinity'::timestamptz) > p_now
                  OR (c.thread = 0 AND v_seq_busy);
                PERFORM 1 FROM {{schema}}.queue_items i WHERE i.id = c.id FOR UPDATE SKIP LOCKED;
                CONTINUE WHEN NOT FOUND;
                RETURN QUERY WITH x AS (
                  SELECT * FROM {{schema}}.kairos_claim_item(c.id, p_owner, p_now, p_lease_until, p_repeat_after)
                ), slot AS (
                  INSERT INTO {{schema}}.kairos_limit_slots (task_type, lease_id, token, group_key)
                  SELECT v_type, x.lease_id, x.token, v_g FROM x WHERE v_lim.concurrency IS NOT NULL
                )
                SELECT * FROM x;
                GET DIAGNOSTICS v_n = ROW_COUNT;
                v_taken := v_taken + v_n;
                v_seq_busy := v_seq_busy OR (c.thread = 0 AND v_n > 0);
              ELSE
                FOR r IN SELECT i.id, i.thread FROM {{schema}}.queue_items i
                  WHERE i.task_type = v_type AND i.group_key = v_g AND i.in_flight = 0
                    AND coalesce(i.run_after, '-infinity'::timestamptz) <= p_now
                  ORDER BY i.priority DESC, i.seq LIMIT least(v_room, v_budget - v_taken)
                  FOR UPDATE SKIP LOCKED
                LOOP
                  CONTINUE WHEN r.thread = 0 AND v_seq_busy;
                  RETURN QUERY WITH x AS (
                    SELECT * FROM {{schema}}.kairos_claim_item(r.id, p_owner, p_now, p_lease_until, p_repeat_after)
                  ), slot AS (
                    INSERT INTO {{schema}}.kairos_limit_slots (task_type, lease_id, token, group_key)
                    SELECT v_type, x.lease_id, x.token, v_g FROM x WHERE v_lim.concurrency IS NOT NULL
                  )
                  SELECT * FROM x;
                  GET DIAGNOSTICS v_n = ROW_COUNT;
                  v_taken := v_taken + v_n;
                  v_seq_busy := v_seq_busy OR (r.thread = 0 AND v_n > 0);
                END LOOP;
              END IF;
              v_group_taken := v_taken - v_group_taken;
              IF v_lim.rate_per_group AND v_group_taken > 0 THEN
                INSERT INTO {{schema}}.kairos_limit_group_windows AS w (task_type, group_key, window_start, starts)
                VALUES (v_type, v_g, v_window, v_group_taken)
                ON CONFLICT ON CONSTRAINT kairos_limit_group_windows_pkey DO UPDATE SET
                  starts = CASE WHEN w.window_start = EXCLUDED.window_start THEN w.starts + EXCLUDED.starts
                    ELSE EXCLUDED.starts END,
                  window_start = EXCLUDED.window_start;
              END IF;
            END LOOP;
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
