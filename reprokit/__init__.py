"""Host side of the kit: specs, plan, runners, result store and report."""
