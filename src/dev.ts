/**
 * `kairos/dev`: an embedded Postgres for development, examples and tests; no server to install.
 */
export * as EmbeddedPostgres from "./adapters/postgres/EmbeddedPostgres.js"
