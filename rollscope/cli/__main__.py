from rollscope.cli import entry

entry()
