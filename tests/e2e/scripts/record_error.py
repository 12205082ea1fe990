"""Fails as a torchrun script with torch's @record does: the error file
holds the exception; its message has two lines, so the last stderr line
alone would not carry it."""
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    raise RuntimeError("boom from main\nsecond line of the message")


if __name__ == "__main__":
    main()
