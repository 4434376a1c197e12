#!/usr/bin/env node
// The kairos command line. tsx is registered first so that kairos's TypeScript sources and a `--tasks` module
// written in TypeScript load on Node 20, which has no TypeScript loader of its own.
import { register } from "tsx/esm/api"

register()
const { main } = await import("../src/adapters/cli/main.ts")
main(process.argv)
