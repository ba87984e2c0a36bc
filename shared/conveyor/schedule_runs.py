"""The schedule run audit's item schema: per schedule, its state and one item per occurrence.

Items are keyed by ``id``: ``<schedule>`` holds the schedule's state (last scheduled time, last
success, next expected time); ``<schedule>@<scheduled time>`` is one occurrence, with its
status and reason code. Occurrence items expire after ``RETENTION``; state items never do.
"""

from datetime import timedelta

KEY = "id"
EXPIRES_AT = "expires_at"
RETENTION = timedelta(days=90)
