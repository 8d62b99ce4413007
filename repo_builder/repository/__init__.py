"""The rendered artifact: the lock file (:mod:`.lockfile`), config.pbtxt reading (:mod:`.pbtxt`) and the
repository lint (:mod:`.validate`)."""
