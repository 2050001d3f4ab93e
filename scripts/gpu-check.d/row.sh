# row SECTION CHECK MEASURED REFERENCE TARGET OK — add a row to the summary
# of scripts/gpu-check; OK is 1 (pass) or 0 (FAIL). Sourced by sections.
row() {
	local v=FAIL
	[ "$6" = 1 ] && v=pass
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$v" >>"${SUMMARY:-/dev/stdout}"
}

# rows SECTION FILE — add FILE's lines (check, measured, reference, target,
# 1 or 0; tab-separated, empty fields allowed) to the summary and print
# them. awk, not `read`: read with a tab IFS merges empty fields away.
rows() {
	awk -F'\t' -v s="$1" 'BEGIN { OFS = "\t" } NF >= 5 {
		print $1 ": " $2 (($3 != "") ? " (" $3 ")" : "")
		print s, $1, $2, $3, $4, ($5 == 1 ? "pass" : "FAIL") >> ENVIRON["SUMMARY"]
	}' "$2"
	! awk -F'\t' '$5 != 1 { bad = 1 } END { exit !bad }' "$2"
}
