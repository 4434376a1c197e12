/**
 * The shipped migrations are frozen: each file's bytes are pinned by hash, and what it runs in schema `public` is
 * pinned by the hash of what the code that built migrations from helpers (before they became files) ran there.
 * Pure file reads: no database.
 */
import { createHash } from "node:crypto"
import fs from "node:fs"
import path from "node:path"
import { describe, expect, it } from "vitest"
import { migrationNames, migrations, migrationSql } from "../../src/adapters/postgres/migrations.js"
import { projectRoot } from "../support/process.js"

const directory = path.join(projectRoot, "src/adapters/postgres/migrations")
const sha256 = (data: string | Buffer): string => createHash("sha256").update(data).digest("hex")

/** sha256 of each shipped file's bytes. */
const fileHashes: ReadonlyArray<readonly [string, string]> = [
  ["0001_scheduled_jobs", "79e563c190c392e2a44fe1588fd7351e344582560de47e6dd5d1987d38360219"],
  ["0002_queue", "6ca6fa5d9042b9d1d591007e3aa8994bd37527f982b70d795b0a8ffa5f6afe17"],
  ["0003_pipeline", "605d89e03a926d212e4e65abc7473790bbb77fa9b5506b213bc1cd7c84a74d7d"],
  ["0004_lean_leases", "4e17ba8ea9def5560852a5c0aeeee3fc48842352e441f74603f77a1efe7f4bd1"],
  ["0005_bad_rows", "ce385f4c100a470cd3464cb216d382779feff384bc393217555387129b0fdd9d"],
  ["0006_unfinished_runs", "10ecbda8d5d87f0add8dab2ac9650fd6c3c450d908acb37ca49995688c46b60a"],
  ["0007_delayed_unique_items", "1540161576b04420fb3af3bd04aebfd497f3427c4ebfc77d3ab6d77f66ffd093"],
  ["0008_retention", "2bd5a199aaa68c1179404d1919140a80425702a21287c9d85799c05fd8b257ab"],
  ["0009_item_retries", "70eb01e5990a2475528ae4b3ae1650e94f74ddf6037327a9540b154a001f8ae4"],
  ["0010_claim_by_index", "d19ccf89ab6315ff2360db188e1c3be70b54b94697099ea54eaee8b4659d4fc9"],
  ["0011_record_and_claim_next", "5f05bf6b6476670868e4f564a30c79607d20f8d972593184c14b66695aa09f85"],
  ["0012_normalize_when_needed", "47c85024554512a3177a900ad170e097c478eba4f79e863a00582e35095e1bc7"],
  ["0013_lighter_claims_and_records", "b97a6b811c6c0f169b1899290abeb9ef5aa9bfe75f9abbe6a411410df13bb164"],
  ["0014_row_leases", "671cc7d344d88b740152ff6eb882d5b9074be462f6fea5796f8ae61050973350"],
  ["0015_lighter_row_lease_records", "8b2df51be7cd9af63475c66d62a144799ac0d3ccaf8f1391ca9777fbbb20a273"],
  ["0016_sequential_row_leases", "238b690245584285ae572513e9960105fdf587f9ecdaf80f865b3705946bd20b"],
  ["0017_record_successes_first", "e0f0b5cd2b41956814ff56951890dccf1a610e7b7c18bcdc3bd39cfb267ea73f"],
  ["0018_prune_as_owner", "d59dad8ba013ff51d2b3223ae6cf3ab5bd3dc52bdeb3b38682c9a1b8a09a230f"],
  ["0019_vacuum_the_queue", "16f91b14a5016b32fe28596d8aa67b0b7db5f1b695ff9ad65435948057917307"],
  ["0020_flows", "8b29ff94b5403e52d956284406d9e3dae8e81d490ae9bedea51f7fcad1eb8a92"],
  ["0021_flow_control", "987ad9d6380191953decdad48cff68c7a453d218170f91c4fcaf7ed3270b26cd"],
  ["0022_waiting_groups", "f2fadfdd7540ae4984f3002559e9f31b1f126c451e349eb9978a4c41b8806103"],
  ["0023_flow_steps", "62e42f03f2a7bcad795a92f01bd83bcc9e275a10d0471e1867c2dfa89f44f7e0"],
  ["0024_group_rates", "2cc2a06b6f94e9ce7f955643b6d10da2b484d42abadee6522e64ca10ccaee703"],
  ["0025_set_based_rotation", "9634af7407a3cb279909d9ce7bef6f0ea7990a153205f01d38a3ddcbf2740281"],
  ["0026_short_limited_claim", "f5cfc27778ac1d1441dcbeda5f3573b1931373d1b7af825dd705670722fdcfe0"],
  ["0027_claim_order_sequence", "52aadbb72ceb7a304af0fd9a9792f874c4b4620dfee26efc8da1792110a7ee8b"],
  ["0028_settle_in_id_order", "351b32b1dd571d7515ee2450c8e7fbad6ea18723b4439f6e0b0aee38389b7fe5"],
  ["0029_queue_page_room", "9277952851bb85b507c11cfcbc94e557bc18310956e1794a5d99e0e2c81b2cdb"]
]

/**
 * sha256 of what each migration ran in schema `public` before migrations were files: its statements as they reached
 * the driver, joined by ";\n" with a final ";\n", 0003's one bound parameter (the sequence's name) written inline as
 * a string literal.
 */
const publicHashes: ReadonlyArray<readonly [string, string]> = [
  ["0001_scheduled_jobs", "1d18b4f193442f2f7d54d6d0032de741da69ee3efcc1e013c1ccf2c9180c229f"],
  ["0002_queue", "2c7703e512925c09cda910bf6dc997c7348b20900c488d25039cf68dace1e9d6"],
  ["0003_pipeline", "c03567694ea84d700aaa70c24bcadb5835d2461d02cd648ab1630ee91ed61e1c"],
  ["0004_lean_leases", "78d0a2faadbf63550801649d001a62b65b1fe1ca6bb32c00d0038a03be015575"],
  ["0005_bad_rows", "1f914953de15969a63fa4c761ca11db80226e4a49bebec66786867f7fa77e955"],
  ["0006_unfinished_runs", "274e0e55e65623cfc9a078b78cfe81810ccc8df2f1906513e001afd0aa17a1ad"],
  ["0007_delayed_unique_items", "198fa2d70a340f3ef06c06c9891541d4cb02a642ace0b6d4f42270a823c70398"],
  ["0008_retention", "2b3f79392922dc2ee097dbc3d587d72c29b7c12d5e88ab9f376d743eae5f27d3"],
  ["0009_item_retries", "500774cd4bb39ca4936a51f539eb92782f4ca05c7bfe0f9939e1429f985aa864"],
  ["0010_claim_by_index", "0af19269ea3bbc58f8b08d334d9076d3eca8d1f4a67c676b9a635c4d9865194a"],
  ["0011_record_and_claim_next", "2c49215bf68af039e474c2e2f5af34b4de98bbcef7e78ddf401c01fd0e77e59a"],
  ["0012_normalize_when_needed", "12aad18c1ca6ad7fe2a70f990bf5cb18c1daac1f0f5951374c6f2b8c4a8182f5"],
  ["0013_lighter_claims_and_records", "fab328c7aa7b6ba603510e1bebb488679401a7a945487367c041f9e954da738a"],
  ["0014_row_leases", "683c15a7888df58e8708cb140e29048de7db7a6dc2c898321b2a324e2492f453"],
  ["0015_lighter_row_lease_records", "2d820886ae2ee53a6bbc1ac4b0f206b33830b4fdd1faeff919fe5d6a7326ccef"],
  ["0016_sequential_row_leases", "dcdcd61b5041b9a4b3f055ac60e78364ab98e8f03a1270842d3ae63791a161f5"],
  ["0017_record_successes_first", "2e1d917bc10bc495a70362b7ad24cca78b57c77ddf86b88677f14c636ebcfe58"]
]

const FROZEN = "a shipped migration never changes: add a new migration instead"

describe("the migration files", () => {
  it("are the shipped migrations, one file each, in order, and their notes", () => {
    const files = fs
      .readdirSync(directory)
      .filter((f) => !f.startsWith("."))
      .sort()
    // Beside the migrations, only their notes (why each is as it is).
    expect(files).toEqual([...migrationNames.map((name) => `${name}.sql`), "NOTES.md"])
    expect(Object.keys(migrations("public"))).toEqual([...migrationNames])
    // Ids one to N: the Migrator orders by the number and records it.
    expect(migrationNames.map((name) => Number(name.slice(0, 4)))).toEqual(migrationNames.map((_, i) => i + 1))
  })

  it("each file's bytes are as shipped", () => {
    expect(
      fileHashes.map(([name]) => name),
      "every shipped migration has a pinned hash"
    ).toEqual([...migrationNames.slice(0, fileHashes.length)])
    for (const [name, hash] of fileHashes) {
      expect(sha256(fs.readFileSync(path.join(directory, `${name}.sql`))), `${name}.sql: ${FROZEN}`).toBe(hash)
    }
    // A migration added after these needs its hash here too.
    expect(migrationNames.length, "a new migration: pin its file's hash in fileHashes").toBe(fileHashes.length)
  })

  it("each migration runs in schema public exactly what it ran before migrations were files", () => {
    // The migrations shipped before they were files (0001-0017); later ones were files from the start.
    expect(publicHashes.map(([name]) => name)).toEqual(fileHashes.slice(0, 17).map(([name]) => name))
    for (const [name, hash] of publicHashes) {
      expect(sha256(migrationSql(name as (typeof migrationNames)[number], "public")), `${name}: ${FROZEN}`).toBe(hash)
    }
  })

  it("name the schema by three placeholders only, each replaced, the schema always a quoted identifier", () => {
    for (const name of migrationNames) {
      const text = fs.readFileSync(path.join(directory, `${name}.sql`), "utf8")
      const placeholders = new Set(text.match(/\{\{[^}]*\}\}/g))
      for (const p of placeholders) expect(["{{schema}}", "{{schema_text}}", "{{channel}}"]).toContain(p)
      expect(text, `${name} names its schema`).toContain("{{schema}}.")
      // Any other brace pair would be real SQL text (an array literal): none exists, so nothing else can collide.
      expect(text.replace(/\{\{(schema|schema_text|channel)\}\}/g, "")).not.toContain("{{")
      const sql = migrationSql(name, "kairos_x")
      expect(sql).not.toContain("{{")
      expect(sql).toContain(`"kairos_x".`)
      // The bare name appears only inside string literals: a sequence's name, a lock key.
      const bare = sql.replaceAll(`"kairos_x".`, "").match(/.{0,12}kairos_x.{0,18}/g) ?? []
      for (const b of bare) expect(b).toMatch(/'(kairos\.(seq|lim)\.)?kairos_x\.(queue_items_seq)?'/)
    }
  })

  it("refuse a schema name that would need more than quoting", () => {
    expect(() => migrationSql("0001_scheduled_jobs", 'x"; DROP TABLE y; --')).toThrow(RangeError)
    expect(() => migrationSql("0001_scheduled_jobs", "Upper")).toThrow(RangeError)
  })
})
