import { defineConfig } from 'vitest/config';
import react from '@vitejs/plugin-react';

// Static files served by rustqueue-console (SPA fallback to index.html); relative asset paths
// so the pages work behind `kubectl port-forward` or any path prefix.
export default defineConfig({
  base: './',
  plugins: [react()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    chunkSizeWarningLimit: 4096,
  },
  css: {
    preprocessorOptions: {
      scss: { quietDeps: true, silenceDeprecations: ['global-builtin', 'import'] },
    },
  },
  test: {
    environment: 'node',
    include: ['src/**/*.test.ts'],
  },
});
