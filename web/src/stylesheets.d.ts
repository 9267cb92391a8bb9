/** Stylesheets imported for their side effect: Vite bundles them into the console's CSS files. */
declare module "*.css";
