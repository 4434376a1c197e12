/**
 * `kairos grant <role>`: as the schema's owner, give a least-privilege role what workers, the CLI and the dashboard
 * need in the schema (src/adapters/postgres/PgGrants.ts says what, and what not).
 */
import * as Args from "@effect/cli/Args"
import * as Command from "@effect/cli/Command"
import * as Effect from "effect/Effect"
import { grant } from "../../postgres/PgGrants.js"
import { CliError } from "../errors.js"
import { common, output, withDb } from "../common.js"

export const grantCommand = Command.make(
  "grant",
  {
    ...common,
    role: Args.text({ name: "role" }).pipe(
      Args.withDescription("the role workers, the CLI and the dashboard connect as (it must exist)")
    )
  },
  (c) =>
    withDb(c, (_sql, schema) =>
      Effect.gen(function* () {
        yield* grant(c.role, { schema }).pipe(Effect.mapError((e) => new CliError({ message: e.message })))
        yield* output(
          c,
          `granted role "${c.role}" what workers, the CLI and the dashboard need in schema "${schema}"`,
          {
            schema,
            role: c.role
          }
        )
      })
    )
).pipe(
  Command.withDescription(
    "as the schema's owner, after migrate: let a role run workers, the CLI and the dashboard in the schema without owning it (no DDL, the log insert-only, no TRUNCATE)"
  )
)
