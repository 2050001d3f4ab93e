// Package testutil holds small helpers that tests in several packages
// need and that belong to no package under test.
package testutil
