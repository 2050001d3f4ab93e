# row SECTION CHECK MEASURED REFERENCE TARGET OK — add a row to the summary
# of scripts/gpu-check.sh; OK is 1 (pass) or 0 (FAIL). Sourced by sections.
row() {
	local v=FAIL
	[ "$6" = 1 ] && v=pass
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$v" >>"${SUMMARY:-/dev/stdout}"
}
