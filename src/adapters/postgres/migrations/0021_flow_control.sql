
      -- Flow control (issue 36): a task type's limits, stored here so that every process obeys the same numbers; an
      -- item's group key; the state of each limited type's rate window and group rotation.
      ALTER TABLE {{schema}}.queue_items ADD COLUMN IF NOT EXISTS group_key text;

      -- A group's items in queue order, and the groups of a type in key order (the rotation walks them). Items
      -- without a group have no entry: the plain path neither writes nor reads it.
      CREATE INDEX IF NOT EXISTS queue_items_groups ON {{schema}}.queue_items (task_type, group_key, priority DESC, seq)
        WHERE group_key IS NOT NULL;

      CREATE TABLE IF NOT EXISTS {{schema}}.queue_limits (
        task_type   text PRIMARY KEY,
        concurrency int CHECK (concurrency IS NULL OR concurrency >= 1),
        per_group   boolean NOT NULL DEFAULT false,
        rate        int CHECK (rate IS NULL OR rate >= 1),
        rate_per_ms bigint CHECK (rate_per_ms IS NULL OR rate_per_ms >= 1),
        updated_at  timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT queue_limits_rate_window CHECK ((rate IS NULL) = (rate_per_ms IS NULL)),
        CONSTRAINT queue_limits_some_limit CHECK (concurrency IS NOT NULL OR rate IS NOT NULL),
        CONSTRAINT queue_limits_group_needs_concurrency CHECK (NOT per_group OR concurrency IS NOT NULL)
      );

      -- Written by claims only (so a claim's write wakes nobody): the current rate window and the starts in it, and
      -- the last group the rotation served.
      CREATE TABLE IF NOT EXISTS {{schema}}.kairos_limit_state (
        task_type     text PRIMARY KEY,
        window_start  timestamptz,
        window_starts int NOT NULL DEFAULT 0,
        group_cursor  text
      );

      -- The executions claimed under a type's limits, by their lease (an id and token as the claim returned them; a
      -- row lease's id is its item's id negated): the limit counts those whose lease still lives. A slot whose
      -- execution finished, or whose lease expired, is dropped by the type's next limited claim, so a count reads
      -- about as many rows as the limit allows, however many items went through (the lease indexes hold an entry for
      -- every item drained since their last vacuum).
      CREATE TABLE IF NOT EXISTS {{schema}}.kairos_limit_slots (
        task_type text NOT NULL,
        lease_id  bigint NOT NULL,
        token     text NOT NULL,
        group_key text,
        PRIMARY KEY (task_type, lease_id, token)
      );

      -- A change of a limit (API, CLI or plain SQL) wakes every runner, which reads the limits again.
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_queue_limits_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        PERFORM pg_notify('{{channel}}', 'settings');
        RETURN NULL;
      END
      $fn$;
      DROP TRIGGER IF EXISTS queue_limits_notify ON {{schema}}.queue_limits;
      CREATE TRIGGER queue_limits_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {{schema}}.queue_limits
      FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.kairos_queue_limits_notify();

      -- One execution of an item the caller chose and locked: its lease on the row when it runs once, else a lease
      -- row. The item's columns as they were before the claim, as kairos_claim returns them.
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_claim_item(
        p_id bigint, p_owner text, p_now timestamptz, p_lease_until timestamptz, p_repeat_after timestamptz
      ) RETURNS TABLE (
        id bigint, task_type text, payload text, status text, priority int, max_runs int, thread int,
        runs_done int, runs_started int, run_after timestamptz, created_at timestamptz, updated_at timestamptz,
        in_flight int, seq bigint, unique_key text, lease_id bigint, token text, attempt int
      ) LANGUAGE plpgsql SET jit = off AS $fn$
      #variable_conflict use_column
      DECLARE
        c {{schema}}.queue_items%ROWTYPE;
        v_token text := to_hex((random() * 4503599627370496)::bigint);
        v_lease bigint;
      BEGIN
        SELECT i.* INTO c FROM {{schema}}.queue_items i WHERE i.id = p_id;
        -- Gone, or taken meanwhile (by a claimer that did not know of the limit yet): nothing.
        IF NOT FOUND OR NOT (c.in_flight = 0 OR (c.thread = 1 AND (c.max_runs = -1 OR c.in_flight < c.max_runs))) THEN
          RETURN;
        END IF;
        IF c.max_runs = 1 AND c.in_flight = 0 THEN
          UPDATE {{schema}}.queue_items i SET in_flight = i.in_flight + 1, runs_started = i.runs_started + 1,
            status = 'processing', updated_at = p_now,
            lease_token = v_token, lease_owner = p_owner, lease_until = p_lease_until
          WHERE i.id = c.id;
          v_lease := -c.id;
        ELSE
          UPDATE {{schema}}.queue_items i SET in_flight = i.in_flight + 1, runs_started = i.runs_started + 1,
            status = 'processing', updated_at = p_now,
            run_after = CASE WHEN i.max_runs = -1 THEN p_repeat_after ELSE i.run_after END,
            seq = CASE WHEN i.max_runs = -1 THEN nextval('{{schema_text}}.queue_items_seq'::regclass) ELSE i.seq END
          WHERE i.id = c.id;
          INSERT INTO {{schema}}.queue_leases AS q (item_id, token, owner, started_at, lease_until, attempt)
          VALUES (c.id, v_token, p_owner, p_now, p_lease_until, c.runs_started + 1)
          RETURNING q.id INTO v_lease;
        END IF;
        id := c.id; task_type := c.task_type; payload := c.payload; status := c.status; priority := c.priority;
        max_runs := c.max_runs; thread := c.thread; runs_done := c.runs_done; runs_started := c.runs_started;
        run_after := c.run_after; created_at := c.created_at; updated_at := c.updated_at; in_flight := c.in_flight;
        seq := c.seq; unique_key := c.unique_key; lease_id := v_lease; token := v_token;
        attempt := c.runs_started + 1;
        RETURN NEXT;
      END
      $fn$;

      -- The claim of task types that have a limit (the caller knows which: the plain kairos_claim never looks here).
      -- Per type, in name order (two claimers never wait for each other's locks in a cycle): the type's lock, held
      -- to the end of the transaction, so limited claims of one type take turns; then, in statements of their own
      -- (each sees what the previous holders committed), the type's slots are counted (kairos_limit_slots: a slot
      -- counts while its execution's lease lives, so a dead holder's slot is free once its lease expires), the rate
      -- window is read by the database's clock, and at most what both allow is claimed: through kairos_claim for a
      -- limit on the whole type, by a rotation over the type's groups for a limit per group.
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
            v_budget := least(v_budget, v_lim.rate - v_used);
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
          IF NOT v_lim.per_group THEN
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
              v_room := v_lim.concurrency - coalesce((v_held_by ->> v_g)::int, 0);
              CONTINUE WHEN v_room <= 0;
              IF v_lim.concurrency = 1 THEN
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
                  SELECT v_type, x.lease_id, x.token, v_g FROM x
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
                    SELECT v_type, x.lease_id, x.token, v_g FROM x
                  )
                  SELECT * FROM x;
                  GET DIAGNOSTICS v_n = ROW_COUNT;
                  v_taken := v_taken + v_n;
                  v_seq_busy := v_seq_busy OR (r.thread = 0 AND v_n > 0);
                END LOOP;
              END IF;
            END LOOP;
          END IF;
          v_left := v_left - v_taken;
          IF v_lim.per_group OR (v_lim.rate IS NOT NULL AND v_taken > 0) THEN
            INSERT INTO {{schema}}.kairos_limit_state AS s (task_type, window_start, window_starts, group_cursor)
            VALUES (v_type, v_window, v_used + v_taken, CASE WHEN v_lim.per_group THEN v_cursor END)
            ON CONFLICT ON CONSTRAINT kairos_limit_state_pkey DO UPDATE SET
              window_start = CASE WHEN v_lim.rate IS NOT NULL THEN v_window ELSE s.window_start END,
              window_starts = CASE WHEN v_lim.rate IS NOT NULL THEN v_used + v_taken ELSE s.window_starts END,
              group_cursor = CASE WHEN v_lim.per_group THEN v_cursor ELSE s.group_cursor END;
          END IF;
        END LOOP;
      END
      $fn$;

      -- kairos_record_and_claim (migration 0016) with the limited claim: a limited type's results and its next claim
      -- in one round trip too.
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_record_and_claim_limited(
        p_lease_ids bigint[], p_tokens text[], p_statuses text[], p_errors text[], p_started timestamptz[],
        p_finished timestamptz[], p_durations int[], p_attempts int[], p_backoff_ms bigint[], p_exponential boolean[],
        p_max_backoff_ms bigint[],
        p_types text[], p_limit int, p_owner text, p_now timestamptz, p_lease_until timestamptz,
        p_repeat_after timestamptz
      ) RETURNS TABLE (
        recorded bigint, id bigint, task_type text, payload text, status text, priority int, max_runs int,
        thread int, runs_done int, runs_started int, run_after timestamptz, created_at timestamptz,
        updated_at timestamptz, in_flight int, seq bigint, unique_key text, lease_id bigint, token text, attempt int
      ) LANGUAGE plpgsql AS $fn$
      DECLARE
        v_on_rows boolean;
        v_in_rows boolean;
      BEGIN
        SELECT bool_or(l < 0), bool_or(l > 0) INTO v_on_rows, v_in_rows FROM unnest(p_lease_ids) AS l;
        IF v_on_rows THEN
          RETURN QUERY SELECT r, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::int, NULL::int, NULL::int,
            NULL::int, NULL::int, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::int, NULL::bigint,
            NULL::text, NULL::bigint, NULL::text, NULL::int
          FROM {{schema}}.kairos_record_row_leases(p_lease_ids, p_tokens, p_statuses, p_errors, p_started, p_finished,
            p_durations, p_attempts, p_backoff_ms, p_exponential, p_max_backoff_ms) AS r;
        END IF;
        IF v_in_rows THEN
          RETURN QUERY SELECT r, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::int, NULL::int, NULL::int,
            NULL::int, NULL::int, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::int, NULL::bigint,
            NULL::text, NULL::bigint, NULL::text, NULL::int
          FROM {{schema}}.kairos_record_once(p_lease_ids, p_tokens, p_statuses, p_errors, p_started, p_finished,
            p_durations, p_attempts, p_backoff_ms, p_exponential, p_max_backoff_ms) AS r;
        END IF;
        RETURN QUERY SELECT NULL::bigint, c.* FROM {{schema}}.kairos_claim_limited(p_types, p_limit, p_owner, p_now,
          p_lease_until, p_repeat_after) AS c;
      END
      $fn$;
