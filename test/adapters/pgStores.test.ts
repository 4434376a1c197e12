/**
 * The Postgres JobStore and Settings against the contract suites (integration: a real Postgres).
 */
import { suite } from "../contracts/JobStoreContract.js"
import { suite as settingsSuite } from "../contracts/SettingsContract.js"
import { PgStores } from "../support/pgStores.js"

suite("postgres", PgStores("jobstore"))
settingsSuite("postgres", PgStores("settings"))
