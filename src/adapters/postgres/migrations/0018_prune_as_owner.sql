      -- Pruning the log runs as the schema's owner: a least-privilege role granted SELECT and INSERT on the log
      -- (kairos grant) prunes by policy through these functions and still cannot delete a log row itself.
      ALTER FUNCTION {{schema}}.kairos_prune_processed(timestamptz, bigint, integer)
        SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
      ALTER FUNCTION {{schema}}.kairos_prune_runs(timestamptz, bigint, integer)
        SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
