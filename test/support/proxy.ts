/**
 * A TCP proxy for the failover test: clients connect to it, it forwards to a Postgres port the test switches (the
 * primary, then the promoted standby), as a virtual IP or a DNS name moved by a failover manager would. With
 * `delayMs`, what the server sends reaches the client that much later (a replication stream lagging behind), and
 * whatever is still delayed when the server's side closes is dropped, as a crashed primary's unsent WAL is. It can
 * also reset its connections as a load balancer does (`resetOnNextUse`).
 */
import net from "node:net"

export interface Proxy {
  readonly port: number
  /** New connections go to `port` from now on. */
  readonly switchTo: (port: number) => void
  /** Closes every connection through the proxy now. */
  readonly cutAll: () => void
  /**
   * Every connection open now is reset (a TCP RST, as a load balancer or a NAT that forgot it sends) when its client
   * next sends anything, which is not forwarded: the client's statement fails with ECONNRESET. Connections made
   * afterwards pass as usual. Returns how many were armed.
   */
  readonly resetOnNextUse: () => number
  /**
   * From now on nothing the servers send reaches the clients: what is still delayed is dropped, and what comes next.
   * The connections stay open (a standby does not reconnect and fetch it again): the link to a standby goes dead at the
   * moment its primary crashes, so what the primary committed within the last `delayMs` is lost, whatever time the
   * crash itself then takes.
   */
  readonly freeze: () => void
  readonly close: () => Promise<void>
}

export const startProxy = async (targetPort: number, options: { readonly delayMs?: number } = {}): Promise<Proxy> => {
  let target = targetPort
  let frozen = false
  const delayMs = options.delayMs ?? 0
  const open = new Set<net.Socket>()
  const pairs = new Map<net.Socket, net.Socket>()
  const server = net.createServer((client) => {
    const upstream = net.connect({ host: "127.0.0.1", port: target })
    let closed = false
    const end = () => {
      if (closed) return
      closed = true
      client.destroy()
      upstream.destroy()
      open.delete(client)
      open.delete(upstream)
      pairs.delete(client)
    }
    open.add(client)
    open.add(upstream)
    pairs.set(client, upstream)
    client.on("error", end).on("close", end)
    upstream.on("error", end).on("close", end)
    client.pipe(upstream)
    if (delayMs <= 0) upstream.pipe(client)
    else
      upstream.on("data", (chunk: Buffer) => {
        // In order: timers of one delay fire in the order they were set.
        setTimeout(() => {
          if (!closed && !frozen) client.write(chunk)
        }, delayMs)
      })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as net.AddressInfo).port
  const cutAll = () => {
    for (const socket of open) socket.destroy()
    open.clear()
  }
  const resetOnNextUse = () => {
    for (const [client, upstream] of pairs) {
      client.unpipe(upstream)
      client.once("data", () => {
        client.resetAndDestroy()
        upstream.destroy()
      })
      // Unpiped, the socket stopped reading: read again, into the listener above.
      client.resume()
    }
    return pairs.size
  }
  return {
    port,
    resetOnNextUse,
    switchTo: (next) => {
      target = next
    },
    cutAll,
    freeze: () => {
      frozen = true
      for (const [client, upstream] of pairs) {
        // Piped (no delay): unpiped, and what comes is read and discarded.
        upstream.unpipe(client)
        upstream.on("data", () => undefined).resume()
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        cutAll()
        server.close(() => resolve())
      })
  }
}

/** A TCP port free now on 127.0.0.1. */
export const freePort = async (): Promise<number> => {
  const server = net.createServer()
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as net.AddressInfo).port
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}
