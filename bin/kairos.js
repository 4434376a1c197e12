#!/usr/bin/env node
// The kairos command line: compiled code only. TypeScript (tsx) is loaded later, and only to import a `--tasks`
// module written in TypeScript.
import { main } from "../dist/adapters/cli/main.js"

main(process.argv)
