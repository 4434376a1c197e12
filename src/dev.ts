/**
 * `kairos/dev`: an embedded Postgres for development, examples and tests; no server to install.
 */
export * as EmbeddedPostgres from "./adapters/postgres/EmbeddedPostgres.js"
/**
 * The development database the CLI uses when no URL is given: a persistent embedded Postgres in the project's
 * `.kairos` folder, started in the background on first use (`DevDatabase.ensure(process.cwd())`), stopped by
 * `kairos db stop`. What a program writes there, `kairos dashboard` and the other commands see.
 */
export * as DevDatabase from "./adapters/postgres/DevDatabase.js"
