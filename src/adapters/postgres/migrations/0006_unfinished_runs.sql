ALTER TABLE {{schema}}.queue_items ADD COLUMN unfinished int NOT NULL DEFAULT 0;
