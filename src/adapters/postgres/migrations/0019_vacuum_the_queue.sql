
      -- The queue's tables churn: every execution leaves dead rows (its item's claimed version and the deleted
      -- item; a lease row, when it holds one there), and a claim walks past the dead index entries of everything
      -- drained since the last vacuum. Autovacuum then vacuums them on each visit once a fixed number of rows died,
      -- however large the backlog (the stock rule waits for a fifth of the table), at full speed (they are small
      -- beside what they save), always cleaning their indexes (the index is what claims walk).
      ALTER TABLE {{schema}}.queue_items SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20000,
        autovacuum_vacuum_cost_delay = 0, vacuum_index_cleanup = on);
      ALTER TABLE {{schema}}.queue_leases SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 20000,
        autovacuum_vacuum_cost_delay = 0, vacuum_index_cleanup = on);

      -- Who vacuums the queue now, and until when no other instance starts: a lease in a row, since a vacuum runs
      -- outside any transaction and a session's advisory lock does not hold behind a transaction pooler.
      CREATE TABLE IF NOT EXISTS {{schema}}.kairos_maintenance (
        task   text PRIMARY KEY,
        holder text,
        until  timestamptz NOT NULL
      );
