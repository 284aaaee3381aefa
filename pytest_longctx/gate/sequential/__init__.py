"""Sequential reading (docs/metrics.md#sequential-reading): score items one at a time, in a fixed order, until
every selected row's and cell's verdict is settled, instead of a fixed number of items.

* **The order.** Within each (config, length) the items by a digest of their key (an order no outcome can move,
  which mixes whatever order the data was built in); the sets of a unit taken in turn, lengths shortest first.
* **exact.** After each item, each check's value over the whole selection is bounded from what is read and
  the most each unread item can count: a share (accuracy, follow) adds, per unread item, between 0 and all of
  its targets (a count known from the data and the baseline); drift (mean KL_K at far reads) adds reads of at
  least ``KL_FLOOR`` nats each and of no upper limit, as many as the baseline's drift block holds; a retained
  effect has no bound (it settles only when read through). A check is settled when every value still possible
  gives the same verdict; the verdict is then the full selection's, by construction. Under ``--longctx-alpha``
  a FAIL also needs the bootstrap over every item, so only a PASS settles early.
* **confident.** Each check's per-item margin (for a share with a threshold relative to the baseline,
  ``hits - baseline hits + drop x scored``; with an absolute one, ``hits - threshold x counted``; for drift,
  ``threshold x reads - KL sum``) has a mean of at least 0 exactly when the check passes on the population of
  items. Two one-sided tests at level alpha watch that mean's boundary, each a capital process of Waudby-Smith
  and Ramdas' betting confidence sequences (JRSS-B 2024) with their predictable plug-in bets: one bets that
  the mean is above 0 (a PASS once its wealth reaches 1/alpha), one that it is below (a FAIL). By Ville's
  inequality either wealth reaches 1/alpha with probability at most alpha while its null holds, however
  often it is looked at. A margin without an upper bound (drift) can only be shown beyond its threshold.
* A row's or cell's test fails when any of its checks does, so once one is settled FAIL the others are not
  needed; an item no open check needs is not read.

The checks of a selection and the reading order (``checks``), what each check's value can still be and each item's
margin for the two tests (``bounds``), and one unit's reading, its stopping record and replay (``reading``): pure
functions of per-item figures and counts, no model, no torch; ``gate/model_run.py`` drives them.
"""
