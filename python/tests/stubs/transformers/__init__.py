"""Stand-in of the parts of transformers the TRL hook touches: TrainerCallback (the event
methods and their (args, state, control, **kwargs) signature) and a Trainer base with
add_callback/remove_callback and the order in which _inner_training_loop fires the events
around one optimizer step (on_step_begin at the first micro-batch, on_substep_end after the
others, on_step_end after the optimizer step, on_log every logging_steps)."""


class TrainerCallback:
    def on_train_begin(self, args, state, control, **kwargs):
        pass

    def on_train_end(self, args, state, control, **kwargs):
        pass

    def on_step_begin(self, args, state, control, **kwargs):
        pass

    def on_substep_end(self, args, state, control, **kwargs):
        pass

    def on_step_end(self, args, state, control, **kwargs):
        pass

    def on_log(self, args, state, control, logs=None, **kwargs):
        pass


class TrainerState:
    def __init__(self):
        self.global_step = 0
        self.log_history = []


class TrainerControl:
    should_evaluate = False


class TrainingArguments:
    def __init__(self, max_steps=3, gradient_accumulation_steps=2, logging_steps=1,
                 report_to=None):
        self.max_steps = max_steps
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.logging_steps = logging_steps
        self.report_to = report_to or []


class Accelerator:
    is_main_process = True
    num_processes = 1

    def gather(self, t):
        return t


class Trainer:
    def __init__(self, args):
        self.args = args
        self.state = TrainerState()
        self.control = TrainerControl()
        self.accelerator = Accelerator()
        self.callbacks = []

    def add_callback(self, cb):
        self.callbacks.append(cb)

    def remove_callback(self, cb):
        self.callbacks.remove(cb)

    def _fire(self, event, **kw):
        for cb in list(self.callbacks):
            getattr(cb, event)(self.args, self.state, self.control, **kw)

    def train(self):
        self._fire("on_train_begin")
        for _ in range(self.args.max_steps):
            for micro in range(self.args.gradient_accumulation_steps):
                if micro == 0:
                    self._fire("on_step_begin")
                self.training_step(micro)
                if micro < self.args.gradient_accumulation_steps - 1:
                    self._fire("on_substep_end")
            self.optimizer_step()
            self.state.global_step += 1
            self._fire("on_step_end")
            if self.state.global_step % self.args.logging_steps == 0:
                logs = {"loss": 0.5}
                self._fire("on_log", logs=logs)
                self.state.log_history.append(logs)
        self._fire("on_train_end")
