/**
 * A login that fails after the server answered leaves no connection behind (EndingClient), so a wrong URL does not
 * hold the process open until the server's authentication_timeout. Integration: an embedded Postgres of its own,
 * with a password, and the wall clock (bounds far below that timeout's minute).
 */
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startEmbedded } from "../../src/adapters/postgres/EmbeddedPostgres.js"
import { EndingClient } from "../../src/adapters/postgres/PgConnect.js"

let server: Awaited<ReturnType<typeof startEmbedded>> | undefined
let admin: pg.Client | undefined
const secret = encodeURIComponent("right horse battery")

beforeAll(async () => {
  server = await startEmbedded({ password: "right horse battery" })
  admin = new pg.Client({ connectionString: server.url })
  await admin.connect()
}, 60_000)

afterAll(async () => {
  await admin?.end()
  await server?.stop()
})

/** Whether the client's socket closes within `ms`. */
const closesWithin = (client: pg.Client, ms: number) =>
  new Promise<boolean>((resolve) => {
    const stream = client.connection.stream
    if (stream.destroyed) return resolve(true)
    const timer = setTimeout(() => resolve(false), ms)
    stream.once("close", () => {
      clearTimeout(timer)
      resolve(true)
    })
  })

describe("EndingClient", () => {
  it("closes the socket of a login that failed for want of a password; node-postgres's own client leaves it open", async () => {
    const noPassword = server!.url.replace(`:${secret}@`, "@")
    const plain = new pg.Client({ connectionString: noPassword })
    const ending = new EndingClient({ connectionString: noPassword })
    try {
      await expect(plain.connect()).rejects.toThrow(/password must be a string/)
      await expect(ending.connect()).rejects.toThrow(/password must be a string/)
      // The server waits for the password on the plain client's socket until its authentication_timeout (a minute),
      // and the process cannot exit meanwhile; ours is closed at once.
      const [plainClosed, endingClosed] = await Promise.all([closesWithin(plain, 1_500), closesWithin(ending, 1_500)])
      expect({ plainClosed, endingClosed }).toEqual({ plainClosed: false, endingClosed: true })
    } finally {
      plain.connection.stream.destroy()
    }
  })

  it("closes it through a pool too, with the callback form of connect", async () => {
    const noPassword = server!.url.replace(`:${secret}@`, "@")
    let made: EndingClient | undefined
    class Watched extends EndingClient {
      constructor(config?: pg.ClientConfig) {
        super(config)
        made = this
      }
    }
    const pool = new pg.Pool({ connectionString: noPassword, Client: Watched })
    try {
      await expect(pool.query("SELECT 1")).rejects.toThrow(/password must be a string/)
      expect(await closesWithin(made!, 1_500)).toBe(true)
    } finally {
      await pool.end()
    }
  })

  it("connects and queries as node-postgres's client does", async () => {
    const pool = new pg.Pool({ connectionString: server!.url, Client: EndingClient })
    try {
      expect((await pool.query<{ n: number }>("SELECT 41 + 1 AS n")).rows).toEqual([{ n: 42 }])
      const client = new EndingClient({ connectionString: server!.url })
      await client.connect()
      expect((await client.query<{ ok: boolean }>("SELECT true AS ok")).rows).toEqual([{ ok: true }])
      await client.end()
    } finally {
      await pool.end()
    }
  })
})
