"""LibreChat-shaped messages in a scratch database, for the MongoDB cost
benchmarks (bench-ack-cost, bench-concurrency): the same documents and the
same indexes LibreChat gives the collection, so what they measure is what a
sync costs the server."""
import datetime
import os

from bson import ObjectId
from pymongo import ASCENDING, MongoClient


def scratch_collection(label):
    """A `messages` collection in a database of its own (drop it at the end)."""
    client = MongoClient(os.environ["MONGO_URI"])
    name = f"{label}_{os.getpid()}"
    return client, name, client[name]["messages"]


def insert_messages(col, n):
    """N unindexed messages, inserted 10,000 at a time; returns them in `_id` order."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    docs = [{"_id": ObjectId(), "messageId": f"m{i}", "conversationId": f"c{i // 10}", "user": "u",
             "text": "hello world " * 10, "updatedAt": now - datetime.timedelta(seconds=i),
             "_meiliIndex": False} for i in range(n)]
    docs.sort(key=lambda d: d["_id"])
    for i in range(0, n, 10_000):
        col.insert_many(docs[i:i + 10_000])
    return docs


def create_lookup_indexes(col):
    """LibreChat's `messageId` (unique) and `conversationId` indexes."""
    col.create_index([("messageId", ASCENDING)], unique=True)
    col.create_index([("conversationId", ASCENDING)])


def create_sync_index(col):
    """LibreChat's sync index, which every flag write maintains."""
    col.create_index([("_meiliIndex", ASCENDING), ("isTemporary", ASCENDING), ("expiredAt", ASCENDING)])
