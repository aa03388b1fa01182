// The vitest config scripts/e2b-conformance runs E2B's js-sdk suite with: the
// suite's own `unit` project (packages/js-sdk/vitest.config.mts at b802997),
// without the browser (Playwright), template (template build API) and
// connectionConfig projects, and without dotenv (the environment is the
// script's). Copied into the work copy of the suite, beside its tests.
import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    name: 'unit',
    include: ['tests/**/*.test.ts'],
    exclude: ['tests/runtimes/**', 'tests/template/**', 'tests/connectionConfig.test.ts'],
    isolate: true,
    globals: false,
    testTimeout: 30_000,
    environment: 'node',
    bail: 0,
    setupFiles: ['tests/globalFetchFallback.setup.ts'],
    server: {},
    deps: { interopDefault: true },
    env: { ...(process.env as Record<string, string>) },
  },
})
