"""reprokit bisect: the smallest set of declared settings that moves a measured ratio across a threshold."""
