/**
 * A readable, deterministic description of a schema from the catalog (no pg_dump needed: the embedded server
 * ships none), with the schema's name replaced by `<schema>` so any test schema compares equal.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { channel } from "../../src/adapters/postgres/PgSchema.js"

export const describeSchema = (schema: string) =>
  Effect.gen(function* () {
    const sql = (yield* SqlClient.SqlClient).withoutTransforms()
    const lines: Array<string> = []
    const columns = yield* sql<{ t: string; c: string; type: string; nullable: string; dflt: string | null }>`
      SELECT table_name AS t, column_name AS c, data_type AS type, is_nullable AS nullable, column_default AS dflt
      FROM information_schema.columns WHERE table_schema = ${schema}
      ORDER BY table_name, ordinal_position`
    let table = ""
    for (const col of columns) {
      if (col.t !== table) {
        table = col.t
        lines.push("", `TABLE ${table}`)
      }
      const dflt = col.dflt === null ? "" : ` DEFAULT ${col.dflt}`
      lines.push(`  ${col.c} ${col.type}${col.nullable === "NO" ? " NOT NULL" : ""}${dflt}`)
    }
    const constraints = yield* sql<{ t: string; name: string; def: string }>`
      SELECT cl.relname AS t, co.conname AS name, pg_get_constraintdef(co.oid) AS def
      FROM pg_constraint co JOIN pg_class cl ON cl.oid = co.conrelid JOIN pg_namespace n ON n.oid = co.connamespace
      WHERE n.nspname = ${schema} ORDER BY cl.relname, co.conname`
    lines.push("", "CONSTRAINTS")
    for (const c of constraints) lines.push(`  ${c.t}.${c.name}: ${c.def}`)
    const indexes = yield* sql<{ name: string; def: string }>`
      SELECT indexname AS name, indexdef AS def FROM pg_indexes WHERE schemaname = ${schema} ORDER BY indexname`
    lines.push("", "INDEXES")
    for (const i of indexes) lines.push(`  ${i.def}`)
    const triggers = yield* sql<{ t: string; name: string; def: string }>`
      SELECT c.relname AS t, tg.tgname AS name, pg_get_triggerdef(tg.oid) AS def
      FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = ${schema} AND NOT tg.tgisinternal ORDER BY c.relname, tg.tgname`
    lines.push("", "TRIGGERS")
    for (const t of triggers) lines.push(`  ${t.def}`)
    // Table settings (migration 0019's autovacuum settings of the queue's tables).
    const storage = yield* sql<{ t: string; options: ReadonlyArray<string> }>`
      SELECT c.relname AS t, c.reloptions AS options
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = ${schema} AND c.relkind = 'r' AND c.reloptions IS NOT NULL ORDER BY c.relname`
    lines.push("", "STORAGE")
    for (const t of storage) lines.push(`  ${t.t}: ${[...t.options].sort().join(", ")}`)
    const functions = yield* sql<{ name: string; def: string }>`
      SELECT p.proname AS name, pg_get_functiondef(p.oid) AS def
      FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = ${schema} ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)`
    lines.push("", "FUNCTIONS")
    for (const f of functions) lines.push(f.def.trim(), "")
    const text = lines.join("\n").trim() + "\n"
    // The NOTIFY channel is derived from the schema's name too.
    return text.split(channel(schema)).join("<channel>").split(schema).join("<schema>")
  })
