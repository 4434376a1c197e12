/**
 * `kairos/dashboard`: the web dashboard, apart from the main entry so that `kairos` does not load an HTTP server.
 *
 * `Dashboard.serve` / `Dashboard.layer` run it on their own port (what `kairos dashboard` does);
 * `Dashboard.router` gives the routes to mount in your own `@effect/platform` HTTP app, whose own authentication must
 * wrap them (or pass `tokenForReads: true`): the token guards the actions, not the pages.
 */
export * as Dashboard from "./adapters/dashboard/Dashboard.js"
