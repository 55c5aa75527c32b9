"""verl tools of the shapes users write that verl runs as they are: static and class methods, an
instance that refuses writes, a slotted class, a registry metaclass and an ``__init_subclass__``
that each refuse a second class of the same name. Each answers ``echo`` with its own tag."""

from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

SCHEMA = OpenAIFunctionToolSchema(
    **{
        "type": "function",
        "function": {
            "name": "echo",
            "description": "Say the text back.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        },
    }
)


def answer(tag: str, parameters: dict[str, Any]) -> tuple[ToolResponse, float, dict]:
    return ToolResponse(text=f"{tag}: {parameters.get('text')}"), 0.0, {}


class StaticExecute(BaseTool):
    @staticmethod
    async def execute(instance_id, parameters, **kwargs):
        return answer("static", parameters)


class ClassExecute(BaseTool):
    tag = "class"

    @classmethod
    async def execute(cls, instance_id, parameters, **kwargs):
        return answer(cls.tag, parameters)


class StaticRelease(BaseTool):
    released: list = []

    async def execute(self, instance_id, parameters, **kwargs):
        return answer("static release", parameters)

    @staticmethod
    async def release(instance_id, **kwargs):
        StaticRelease.released.append(instance_id)


class ClassCreate(BaseTool):
    @classmethod
    async def create(cls, instance_id=None, **kwargs):
        return instance_id or "made-by-class", ToolResponse()

    async def execute(self, instance_id, parameters, **kwargs):
        return answer(f"class create {instance_id}", parameters)


class Frozen(BaseTool):
    def __init__(self, config, tool_schema):
        super().__init__(config, tool_schema)
        object.__setattr__(self, "_frozen", True)

    def __setattr__(self, name, value):
        if getattr(self, "_frozen", False):
            raise AttributeError(f"{type(self).__name__} is frozen: cannot set {name}")
        super().__setattr__(name, value)

    async def execute(self, instance_id, parameters, **kwargs):
        return answer("frozen", parameters)


class Slotted(BaseTool):
    __slots__ = ("extra",)

    async def execute(self, instance_id, parameters, **kwargs):
        return answer("slotted", parameters)


class Registry(type):
    """A metaclass that registers tool classes by name and refuses a second of the same name."""

    classes: dict[str, type] = {}

    def __new__(mcs, name, bases, namespace, **kwargs):
        if name in mcs.classes:
            raise TypeError(f"a tool class named {name!r} is registered already")
        cls = super().__new__(mcs, name, bases, namespace, **kwargs)
        mcs.classes[name] = cls
        return cls


class Registered(BaseTool, metaclass=Registry):
    async def execute(self, instance_id, parameters, **kwargs):
        return answer("registered", parameters)


class OneOfEachName(BaseTool):
    names: set = set()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__name__ in OneOfEachName.names:
            raise TypeError(f"two tool classes named {cls.__name__!r}")
        OneOfEachName.names.add(cls.__name__)


class Unique(OneOfEachName):
    async def execute(self, instance_id, parameters, **kwargs):
        return answer("unique", parameters)


SHAPES = [StaticExecute, ClassExecute, StaticRelease, ClassCreate, Frozen, Slotted, Registered, Unique]
# the shapes whose class refuses a traced subclass: run untraced, with a warning
REFUSE_A_SUBCLASS = {Registered, Unique}
