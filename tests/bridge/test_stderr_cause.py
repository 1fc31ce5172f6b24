from ddtctl.bridge.client import stderr_cause


def test_a_cpp_abort_names_the_exception_not_the_last_stack_frame():
    stderr = "\n".join([
        "terminate called after throwing an instance of 'c10::Error'",
        "  what():  Tried to register an operator (torchvision::nms) with the same name multiple times",
        "Exception raised from registerDef at ../aten/src/ATen/core/dispatch/Dispatcher.cpp:239",
        "frame #0: c10::Error::Error(...) + 0x98",
        "frame #62: /venv/bin/python() [0x5d33dc]",
        "",
    ])
    assert stderr_cause(stderr).startswith("what():  Tried to register an operator (torchvision::nms)")


def test_a_python_crash_names_its_exception():
    stderr = "Traceback (most recent call last):\n  File \"w.py\", line 3, in <module>\nImportError: no module named x\n"
    assert stderr_cause(stderr) == "ImportError: no module named x"


def test_plain_output_falls_back_to_its_last_line_and_empty_is_said():
    assert stderr_cause("starting\nbye\n") == "bye"
    assert stderr_cause("") == "no output on stderr"
