
      -- Room on each page of the queue for its items' claimed versions (NOTES.md, 0029). A claim's UPDATE is never HOT
      -- (the lease's columns are indexed), and on a full page its new version went to another page: Postgres first
      -- wrote a lock of the old version (a WAL record more) and looked for free space, extending the table while a
      -- backlog's pages were all full. Pages written from now on are filled to half; those written before keep what
      -- they hold.
      ALTER TABLE {{schema}}.queue_items SET (fillfactor = 50);
