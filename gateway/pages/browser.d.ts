/** Stylesheets the browser scripts import: esbuild bundles them into the entry's own .css file. */
declare module "*.css";
