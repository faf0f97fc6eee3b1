"""ctypes mirrors of the C structures the binding passes (include/eerl/core.h, runtime.h, agent.h).

Owns nothing but layouts and the enum name tables. python/tests/test_binding.py
(test_struct_layouts_match_the_headers) compiles a small C
program against the headers and compares every size and offset with these, so a header change
that is not mirrored here fails the tests instead of corrupting memory.
"""

import ctypes as C

GROUPS_MAX = 4
PHASE_COUNT = 5
POOLS_MAX = 2
RT_POOL_GPUS_MAX = 64
RT_GPUS_LIMIT = 1 << 20  # EERL_RT_GPUS_LIMIT
REASON_MAX = 160
DEVICE_NAME_MAX = 96
DEVICE_UUID_MAX = 96

MODES = {"colocated": 0, "disaggregated": 1, "drained": 2, "inflight": 3}
STRATEGIES = {"paper": 0, "eerl": 1, "governor": 2, "global-clock": 4, "linear-search": 5}
# The C phase names (src/core/observation.c) and the spellings frameworks use for them.
PHASES = {"generation": 0, "logprob": 1, "training": 2, "refit": 3, "other": 4}
PHASE_ALIASES = {"gen": "generation", "log-prob": "logprob", "log_prob": "logprob",
                 "train": "training", "weight_update": "refit", "update_weights": "refit"}
POOL_GEN, POOL_TRAIN = 0, 1
POOL_BOTH = 2  # EERL_RT_POOL_BOTH: both pools at one boundary
# eerl_state; the index is the numeric eerl/state_code that trackers get (docs/python.md).
STATES = ["calibrating", "searching", "confirming", "locked", "monitoring"]
CLOCK_GOVERNOR = 0

# eerl_agent_phase
AGENT_PHASE_GEN, AGENT_PHASE_TRAIN, AGENT_PHASE_IDLE = 0, 1, 2


class Setting(C.Structure):
    _fields_ = [("mhz", C.c_uint * GROUPS_MAX), ("idle_mhz", C.c_uint)]

    def to_dict(self):
        return {"gen_mhz": self.mhz[0], "train_mhz": self.mhz[1], "idle_mhz": self.idle_mhz}


class Obs(C.Structure):
    _fields_ = [
        ("update", C.c_uint64),
        ("gen_tokens", C.c_double),
        ("valid_tokens", C.c_double),
        ("longest_tokens", C.c_double),
        ("policy_age", C.c_int),
        ("time_s", C.c_double),
        ("energy_j", C.c_double),
        ("phase_time_s", C.c_double * PHASE_COUNT),
        ("phase_energy_j", C.c_double * PHASE_COUNT),
        ("arrival_s", C.c_double * POOLS_MAX),
        ("pool_energy_j", C.c_double * POOLS_MAX),
        ("flags", C.c_uint),
        ("setting", Setting),
    ]


class CtlStatus(C.Structure):
    _fields_ = [
        ("mode", C.c_int),
        ("strategy", C.c_int),
        ("state", C.c_int),
        ("setting", Setting),
        ("locked", C.c_int),
        ("locked_setting", Setting),
        ("observed", C.c_uint64),
        ("rejected", C.c_uint64),
        ("trials", C.c_uint64),
        ("refreshes", C.c_uint64),
        ("events_dropped", C.c_uint64),
        ("block_updates", C.c_uint),
        ("references", C.c_uint),
    ]


class Event(C.Structure):
    _fields_ = [
        ("update", C.c_uint64),
        ("kind", C.c_int),
        ("state", C.c_int),
        ("candidate", Setting),
        ("next", Setting),
        ("verdict", C.c_int),
        ("n_updates", C.c_uint),
        ("time_ratio", C.c_double),
        ("energy_ratio", C.c_double),
        ("meas_time_ratio", C.c_double),
        ("meas_energy_ratio", C.c_double),
        ("reason", C.c_char * REASON_MAX),
    ]


LOCK_FN = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(C.c_uint), C.c_size_t, C.c_uint)
RESTORE_FN = C.CFUNCTYPE(C.c_int, C.c_void_p)
LAST_ERROR_FN = C.CFUNCTYPE(C.c_char_p, C.c_void_p)


class RtClockOwner(C.Structure):
    _fields_ = [("ctx", C.c_void_p), ("lock", LOCK_FN), ("restore", RESTORE_FN),
                ("last_error", LAST_ERROR_FN)]


class RtConfig(C.Structure):
    # Size-tagged (include/eerl/runtime.h): "size" is this mirror's sizeof, set by
    # eerl_rt_config_init(mode, cfg, sizeof(RtConfig)).
    _fields_ = [
        ("size", C.c_size_t),
        ("mode", C.c_int),
        ("gen_gpus", C.c_uint * RT_POOL_GPUS_MAX),
        ("n_gen", C.c_size_t),
        ("train_gpus", C.c_uint * RT_POOL_GPUS_MAX),
        ("n_train", C.c_size_t),
        ("allowed_loss", C.c_double),
        ("strategy", C.c_int),
        ("observe_only", C.c_int),
        ("trace_path", C.c_char_p),
        ("trace_run_json", C.c_char_p),
        ("producer", C.c_char_p),
        ("ctl_cfg", C.c_void_p),
        ("governor_peak_mhz", C.c_uint),
        ("clock", C.c_void_p),
        ("clock_ctx", C.c_void_p),
        ("meter_interval_ms", C.c_uint),
        ("sample_thread", C.c_int),
        ("owner", C.POINTER(RtClockOwner)),
        ("resume_from", C.c_char_p),
        ("resume_tag", C.c_char_p),
        ("gen_pool", C.POINTER(C.c_uint)),
        ("train_pool", C.POINTER(C.c_uint)),
        ("node_of", C.POINTER(C.c_uint)),
        ("n_node_of", C.c_size_t),
        ("prior", C.c_char_p),
        ("job_model", C.c_char_p),
        ("eerld", C.c_int),
        ("eerld_socket", C.c_char_p),
    ]


# eerl_rt_eerld: whether a session goes through eerld (the runtime decides: include/eerl/runtime.h)
RT_EERLD_AUTO, RT_EERLD_OFF, RT_EERLD_ON = 0, 1, 2


class RtWork(C.Structure):
    _fields_ = [
        ("update", C.c_uint64),
        ("gen_tokens", C.c_double),
        ("valid_tokens", C.c_double),
        ("longest_tokens", C.c_double),
        ("policy_version", C.c_int64),
    ]


class RtUpdateInfo(C.Structure):
    _fields_ = [
        ("obs", Obs),
        ("accepted", C.c_int),
        ("requested", Setting),
        ("next", Setting),
        ("state", C.c_int),
        ("n_events", C.c_size_t),
        ("meter_flags", C.c_uint),
    ]


class DeviceReading(C.Structure):
    """eerl_device_reading (include/eerl/device.h): one GPU's reading that a remote device's read
    callback fills. has_reasons/reasons and limit_mw are optional: left 0 they are "not read"."""
    _fields_ = [("err", C.c_int), ("energy_mj", C.c_uint64), ("power_mw", C.c_uint),
                ("sm_mhz", C.c_uint), ("has_reasons", C.c_int), ("limit_mw", C.c_uint),
                ("reasons", C.c_uint64)]


DEVICE_READ_FN = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(DeviceReading), C.c_size_t)


class AgentInfo(C.Structure):
    _fields_ = [("gpus", C.c_uint), ("heartbeat_ms", C.c_uint), ("uid", C.c_uint),
                ("may_lease", C.c_int), ("server", C.c_char * 64)]


class AgentReading(C.Structure):
    _fields_ = [("gpu", C.c_uint), ("err", C.c_int), ("energy_mj", C.c_uint64),
                ("power_mw", C.c_uint), ("sm_mhz", C.c_uint), ("has_reasons", C.c_int),
                ("reasons", C.c_uint), ("limit_mw", C.c_uint)]


class Estimate(C.Structure):
    """eerl_estimate (include/eerl/estimate.h): what eerl saved on the run so far."""
    _fields_ = [
        ("updates", C.c_uint),
        ("judged_updates", C.c_uint),
        ("calibration_updates", C.c_uint),
        ("not_counted", C.c_uint),
        ("energy_j", C.c_double),
        ("predicted_governor_energy_j", C.c_double),
        ("saved_j", C.c_double),
        ("saved_ci_j", C.c_double * 2),
        ("time_s", C.c_double),
        ("predicted_governor_time_s", C.c_double),
        ("saving_pct", C.c_double),
        ("saving_ci_pct", C.c_double * 2),
        ("throughput_change_pct", C.c_double),
        ("throughput_ci_pct", C.c_double * 2),
        ("judged", C.c_int),
        ("why", C.c_char * 256),
    ]


# include/eerl/doctor.h
DOCTOR_NAME_MAX = 32
DOCTOR_TEXT_MAX = 384
DOCTOR_CHECKS_MAX = 1056
DOCTOR_LEVELS = ["ok", "warning", "error"]  # eerl_doctor_level


class DoctorCheck(C.Structure):
    _fields_ = [("name", C.c_char * DOCTOR_NAME_MAX), ("level", C.c_int),
                ("message", C.c_char * DOCTOR_TEXT_MAX), ("fix", C.c_char * DOCTOR_TEXT_MAX)]


# name -> (struct, [fields]) for the layout test; C type names as the headers spell them.
LAYOUTS = {
    "eerl_setting": Setting,
    "eerl_obs": Obs,
    "eerl_ctl_status": CtlStatus,
    "eerl_event": Event,
    "eerl_rt_clock_owner": RtClockOwner,
    "eerl_rt_config": RtConfig,
    "eerl_rt_work": RtWork,
    "eerl_rt_update_info": RtUpdateInfo,
    "eerl_estimate": Estimate,
    "eerl_device_reading": DeviceReading,
    "struct eerl_agent_info": AgentInfo,
    "struct eerl_agent_reading": AgentReading,
    "struct eerl_doctor_check": DoctorCheck,
}


def phase_id(name):
    key = PHASE_ALIASES.get(name, name)
    if key not in PHASES:
        raise ValueError("unknown phase %r: use one of %s (or %s)"
                         % (name, ", ".join(PHASES), ", ".join(sorted(PHASE_ALIASES))))
    return key, PHASES[key]


class CtlConfig(C.Structure):
    # Size-tagged (include/eerl/core.h): "size" is this mirror's sizeof, set by
    # eerl_ctl_config_init(mode, cfg, sizeof(CtlConfig)). The whole struct: the controller's
    # research knobs are no fields of it but experimental options of the table (eerl.options),
    # set on a controller by name from C only (eerl/options.h, with EERL_EXPERIMENTAL).
    _fields_ = [
        ("size", C.c_size_t),
        ("strategy", C.c_int),
        ("allowed_loss", C.c_double),
        ("min_saving", C.c_double),
        ("calibration_updates", C.c_uint),
        ("trial_updates", C.c_uint),
        ("governor_between", C.c_uint),
        ("confirm_updates", C.c_uint),
        ("confirm_trials_max", C.c_uint),
        ("max_trials", C.c_uint),
        ("grid_mhz", C.c_uint),
        ("first_grid_mhz", C.c_uint),
        ("second_grid_mhz", C.c_uint),
        ("start_drop_gen_mhz", C.c_uint),
        ("start_drop_train_mhz", C.c_uint),
        ("start_drop_first_mhz", C.c_uint),
        ("start_drop_second_mhz", C.c_uint),
        ("feedback_step_mhz", C.c_uint),
        ("feedback_big_step_mhz", C.c_uint),
        ("big_loss", C.c_double),
        ("monitor_margin", C.c_double),
        ("monitor_every", C.c_uint),
        ("monitor_window", C.c_uint),
        ("idle_mhz", C.c_uint),
        ("ref_window", C.c_uint),
        ("refresh_updates", C.c_uint),
        ("coverage_margin", C.c_double),
        ("coverage_fail_limit", C.c_uint),
        ("block_choices", C.c_uint * 4),
        ("se_target", C.c_double),
        ("inflight_lock_candidate_blocks", C.c_uint),
        ("time_tolerance", C.c_double),
        ("expected_updates", C.c_uint),
        ("budget_margin", C.c_double),
        ("fast_calibration_updates", C.c_uint),
        ("static_setting", Setting),
        ("n_groups", C.c_uint),
        ("group_names", (C.c_char * 16) * 4),
    ]


LAYOUTS["eerl_ctl_config"] = CtlConfig
OBS_ARRIVALS, OBS_CARRYOVER, OBS_POOL_ENERGY = 0x1, 0x2, 0x4
EVENT_KINDS = ["reject", "hold", "skip", "calibrated", "block", "propose", "trial", "confirm",
               "round", "lock", "monitor", "adjust", "refresh"]
