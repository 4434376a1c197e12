
      CREATE TABLE {{schema}}.scheduled_jobs (
        id          bigserial PRIMARY KEY,
        name        text NOT NULL UNIQUE,
        task_type   text NOT NULL,
        payload     text DEFAULT '',
        schedule    jsonb NOT NULL,
        enabled     boolean NOT NULL DEFAULT true,
        next_run_at timestamptz,
        missed_slots text CHECK (missed_slots IN ('latest', 'skip')),
        overlap     text NOT NULL DEFAULT 'skip' CHECK (overlap IN ('skip', 'allow')),
        created_at  timestamptz NOT NULL DEFAULT now(),
        updated_at  timestamptz NOT NULL DEFAULT now()
      );
CREATE INDEX scheduled_jobs_due ON {{schema}}.scheduled_jobs (next_run_at NULLS FIRST, id) WHERE enabled;

      CREATE TABLE {{schema}}.job_runs (
        id            bigserial PRIMARY KEY,
        job_id        bigint NOT NULL REFERENCES {{schema}}.scheduled_jobs (id) ON DELETE CASCADE,
        scheduled_for timestamptz NOT NULL,
        attempt       int NOT NULL CHECK (attempt >= 1),
        status        text NOT NULL CHECK (status IN ('pending', 'running', 'success', 'failed', 'skipped')),
        started_at    timestamptz,
        finished_at   timestamptz,
        output        jsonb,
        error         text,
        due_at        timestamptz,
        owner         text,
        lease_until   timestamptz,
        lease_token   text,
        UNIQUE (job_id, scheduled_for, attempt)
      );
CREATE INDEX job_runs_pending_due ON {{schema}}.job_runs (due_at, id) WHERE status = 'pending';
CREATE INDEX job_runs_running ON {{schema}}.job_runs (job_id, lease_until) WHERE status = 'running';
CREATE INDEX job_runs_running_lease ON {{schema}}.job_runs (lease_until) WHERE status = 'running';

      CREATE TABLE {{schema}}.scheduler_meta (
        key   text PRIMARY KEY,
        value text NOT NULL
      );
