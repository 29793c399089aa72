// Package internal holds what gocurrent's own tests share and users do not
// need: the import-direction check (internal/importgraph) and, later,
// gradient-check helpers.
package internal
