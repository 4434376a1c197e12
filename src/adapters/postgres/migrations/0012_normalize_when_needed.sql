DROP TRIGGER queue_items_normalize ON {{schema}}.queue_items;

      CREATE TRIGGER queue_items_normalize BEFORE INSERT ON {{schema}}.queue_items
      FOR EACH ROW WHEN (
        NEW.max_runs IS NULL OR NOT (NEW.max_runs = -1 OR NEW.max_runs >= 1)
        OR (NEW.thread IS DISTINCT FROM 0 AND NEW.thread IS DISTINCT FROM 1)
        OR NEW.priority IS NULL
        OR NEW.status IS DISTINCT FROM 'pending'
        OR NEW.in_flight IS DISTINCT FROM 0 OR NEW.runs_done IS DISTINCT FROM 0 OR NEW.runs_started IS DISTINCT FROM 0
        OR NEW.created_at IS NULL OR NEW.updated_at IS NULL
      ) EXECUTE FUNCTION {{schema}}.kairos_queue_items_normalize();
