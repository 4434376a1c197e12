/**
 * `kairos migrate`: create or upgrade kairos's tables.
 */
import * as Command from "@effect/cli/Command"
import * as Effect from "effect/Effect"
import { migrate } from "../../postgres/migrations.js"
import { common, output, withDb } from "../common.js"

export const migrateCommand = Command.make("migrate", common, (c) =>
  withDb(c, (_sql, schema) =>
    Effect.gen(function* () {
      const applied = yield* migrate({ schema })
      const names = applied.map(([id, name]) => `${String(id).padStart(4, "0")}_${name}`)
      yield* output(c, names.length === 0 ? `schema "${schema}" is up to date` : `applied ${names.join(", ")}`, {
        schema,
        applied: names
      })
    })
  )
).pipe(Command.withDescription("create or upgrade kairos's tables in the schema"))
