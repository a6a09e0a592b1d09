"""Legality of schedules against dependences (filled in with the dependence analysis)."""
from ..schedule import schedule as _sched


def check_loop_kind(schedule, stage, iv, what):
    return None


def check_attach(schedule, stage, parent, iv, what):
    return None


def legal_attach_points(schedule, stage):
    return []


def check_schedule(program):
    return None


_sched.HOOKS.update(check_loop_kind=check_loop_kind, check_attach=check_attach,
                    legal_attach_points=legal_attach_points)
