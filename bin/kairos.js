#!/usr/bin/env node
// The kairos command line: compiled code only. TypeScript (tsx) is loaded later, and only to import a `--tasks`
// module written in TypeScript.
//
// Every command but `worker` runs from one bundled file, dist/cli.js (scripts/bundle-cli.mjs), which Node loads
// about three times faster than the separate modules. `worker` imports the user's tasks module, which imports kairos
// and Effect from node_modules: it runs dist/adapters/cli/main.bundle.js, which bundles only the CLI's own parts and
// imports kairos's modules and Effect from where they are, so that the two share one copy of each.
const { main } = await import(process.argv[2] === "worker" ? "../dist/adapters/cli/main.bundle.js" : "../dist/cli.js")

main(process.argv)
