/**
 * `node checkTypes.mjs <typescript> <project folder>`: type-checks a project as `tsc -p` does (its tsconfig.json),
 * reporting what tsc would, but checking only the project's own files and kairos's declarations, not those of the
 * other packages it reaches (Effect's alone are most of tsc's ~8 s of CPU there; this takes ~3.5 s). A declaration
 * of kairos that names a module the install lacks still fails here, as under tsc without skipLibCheck. Prints the
 * diagnostics as tsc does; exits 1 when there are any.
 */
import { createRequire } from "node:module"
import path from "node:path"

const [typescript, project] = process.argv.slice(2)
const ts = createRequire(import.meta.url)(typescript)
const parsed = ts.getParsedCommandLineOfConfigFile(
  path.join(project, "tsconfig.json"),
  {},
  {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, "\n"))
    }
  }
)
const program = ts.createProgram({ rootNames: parsed.fileNames, options: parsed.options })
const checked = (file) => !file.fileName.includes("/node_modules/") || file.fileName.includes("/node_modules/kairos/")
const diagnostics = [
  ...parsed.errors,
  ...program.getOptionsDiagnostics(),
  ...program.getGlobalDiagnostics(),
  ...program
    .getSourceFiles()
    .filter(checked)
    .flatMap((file) => [...program.getSyntacticDiagnostics(file), ...program.getSemanticDiagnostics(file)])
]
const host = { getCanonicalFileName: (f) => f, getCurrentDirectory: () => project, getNewLine: () => "\n" }
process.stdout.write(ts.formatDiagnostics(diagnostics, host))
process.exitCode = diagnostics.length === 0 ? 0 : 1
