
      -- Record batches that settle the same waiters take their locks in one order (NOTES.md, 0028). 0020's row
      -- trigger settled each linked item as its row left the queue, locking that item's waiters: two batches finishing
      -- items with waiters in common (a fan-in) locked them in the order of their own items, could each hold a waiter
      -- the other needed, and waited for Postgres's deadlock check (a second) to abort one. Now the trigger sees the
      -- statement's deleted rows (its transition table), and one firing settles all of its linked items, taking each
      -- waiting row's lock in id order: when all ended well, as it counts the waiters down one by one; when any did
      -- not, all at once before anything changes (the doom deletes what waits for their waiters, transitively).
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_flow_items_gone() RETURNS trigger LANGUAGE plpgsql
      SET enable_seqscan = off AS $fn$
      DECLARE
        v_ids bigint[];
        v_statuses text[];
        v_ok bigint[];
        v_bad bigint[];
        v_ready bigint[] := '{}';
        v_waiters bigint[];
        v_remaining int;
        v_w record;
      BEGIN
        -- One firing settles the statement's linked items: the one for the lowest id among them.
        IF EXISTS (SELECT 1 FROM gone g WHERE g.linked AND g.id < OLD.id) THEN
          RETURN NULL;
        END IF;
        -- How each ended: its log row written in this transaction (none: cancelled or deleted by hand).
        -- (created_at is the transaction's start: the same for a row a subtransaction of it wrote.)
        SELECT array_agg(g.id ORDER BY g.id), array_agg(s.status ORDER BY g.id),
          array_agg(g.id ORDER BY g.id) FILTER (WHERE s.status = 'ok'),
          array_agg(g.id ORDER BY g.id) FILTER (WHERE s.status IS DISTINCT FROM 'ok')
          INTO v_ids, v_statuses, v_ok, v_bad
        FROM gone g
        LEFT JOIN LATERAL (
          SELECT p.status FROM {{schema}}.processed_items p
          WHERE p.queue_item_id = g.id AND (p.xmin = pg_current_xact_id()::xid OR p.created_at = now())
          ORDER BY p.id DESC LIMIT 1
        ) s ON true
        WHERE g.linked;
        IF v_bad IS NOT NULL THEN
          UPDATE {{schema}}.flow_steps SET cancelled_at = now()
          WHERE id IN (SELECT x.id FROM unnest(v_ids, v_statuses) AS x(id, status) WHERE x.status IS NULL);
          PERFORM 1 FROM {{schema}}.queue_waiting w
          WHERE w.id IN (
            SELECT w0.id FROM {{schema}}.queue_waiting w0 WHERE w0.after && v_ids
            UNION
            SELECT d.id FROM (
              WITH RECURSIVE d(id) AS (
                SELECT w1.id FROM {{schema}}.queue_waiting w1 WHERE w1.after && v_bad
                UNION
                SELECT w2.id FROM d JOIN {{schema}}.queue_waiting w2 ON w2.after @> ARRAY[d.id]
              )
              SELECT d.id FROM d
            ) d
          )
          ORDER BY w.id FOR UPDATE;
        END IF;
        -- Each waiter counted down once by as many of these items as it waits for, in id order; none reaches zero
        -- while it still waits for one that did not end well.
        IF v_ok IS NOT NULL THEN
          FOR v_w IN
            SELECT w.id, (SELECT count(*) FROM unnest(v_ok) AS x(id) WHERE x.id = ANY(w.after))::int AS n
            FROM {{schema}}.queue_waiting w WHERE w.after && v_ok ORDER BY w.id
          LOOP
            UPDATE {{schema}}.queue_waiting SET remaining = remaining - v_w.n
            WHERE id = v_w.id AND blocked_by IS NULL
            RETURNING remaining INTO v_remaining;
            IF v_remaining <= 0 THEN
              v_ready := v_ready || v_w.id;
            END IF;
          END LOOP;
          IF cardinality(v_ready) > 0 THEN
            PERFORM {{schema}}.kairos_flow_release(v_ready);
          END IF;
        END IF;
        -- What waits for those that did not, item by item in id order: never to run.
        FOR k IN 1..coalesce(cardinality(v_bad), 0) LOOP
          SELECT array_agg(w.id ORDER BY w.id) INTO v_waiters FROM {{schema}}.queue_waiting w
            WHERE w.after @> ARRAY[v_bad[k]];
          CONTINUE WHEN v_waiters IS NULL;
          PERFORM {{schema}}.kairos_flow_doom(v_waiters, v_bad[k],
            CASE WHEN v_statuses[array_position(v_ids, v_bad[k])] = 'error' THEN 'failed' ELSE 'was cancelled' END);
        END LOOP;
        RETURN NULL;
      END
      $fn$;
      DROP TRIGGER IF EXISTS queue_items_flow_settle ON {{schema}}.queue_items;
      CREATE TRIGGER queue_items_flow_settle AFTER DELETE ON {{schema}}.queue_items
        REFERENCING OLD TABLE AS gone FOR EACH ROW WHEN (OLD.linked)
        EXECUTE FUNCTION {{schema}}.kairos_flow_items_gone();
      DROP FUNCTION IF EXISTS {{schema}}.kairos_flow_item_gone();
