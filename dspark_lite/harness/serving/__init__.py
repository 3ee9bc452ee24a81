"""Serving: step timing, cost profiling (SPS tables), batched verification, the serving simulator,
the wall-clock race, the files the serving engines read, and the scheduler's studies
(chapters 02, 04, 06, 06b). It imports the method and the harness's base modules, nothing from
the other rooms.
"""
