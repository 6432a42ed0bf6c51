// Package docs holds the tests of the documentation site (docs/site, built
// by Hugo from website/): the navigation lists every page, the diagrams are
// rendered from their sources, and the built site, served on loopback and
// driven in headless Chromium, loads every page without a console error,
// has no broken link or anchor, and searches. Screenshots of a few pages
// are written to build/screenshots (MARIPOSA_SCREENSHOTS overrides) for a
// person to look at.
package docs
