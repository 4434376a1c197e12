UPDATE {{schema}}.scheduled_jobs SET next_run_at = NULL WHERE NOT isfinite(next_run_at);
UPDATE {{schema}}.scheduled_jobs SET created_at = now() WHERE NOT isfinite(created_at);
UPDATE {{schema}}.scheduled_jobs SET updated_at = now() WHERE NOT isfinite(updated_at);
ALTER TABLE {{schema}}.scheduled_jobs ADD CONSTRAINT scheduled_jobs_times_must_be_finite
      CHECK (isfinite(next_run_at) AND isfinite(created_at) AND isfinite(updated_at));
ALTER TABLE {{schema}}.queue_items ADD CONSTRAINT queue_items_times_must_be_finite
      CHECK (isfinite(created_at) AND isfinite(updated_at) AND isfinite(run_after)) NOT VALID;
ALTER TABLE {{schema}}.job_runs ADD CONSTRAINT job_runs_times_must_be_finite
      CHECK (isfinite(scheduled_for) AND isfinite(started_at) AND isfinite(finished_at) AND isfinite(due_at)
        AND isfinite(lease_until)) NOT VALID;
