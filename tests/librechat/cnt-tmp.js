const { MongoClient } = require('mongodb');
(async () => {
  const c = new MongoClient(process.env.MONGO_URI); await c.connect();
  const db = c.db('bench_inc'); const m = db.collection('messages');
  const now = new Date();
  const searchable = { $or: [ {isTemporary:false, expiredAt:null}, {isTemporary:false, expiredAt:{$gt:now}}, {isTemporary:null, expiredAt:null} ], user: {$nin:[null,'']}, unfinished: {$ne:true} };
  const unflagged = { _meiliIndex: {$ne: true} };
  const anyf = { $or: [ {_meiliIndex: {$ne:true}}, {_meiliIndexSchemaVersion: {$ne: 1}} ] };
  const idx = await m.indexes(); console.log(idx.map(i=>i.name).join(' '));
  for (const [name, f, hint] of [['unflagged', {$and:[unflagged, searchable]}, null], ['unflagged-hint', {$and:[unflagged, searchable]}, process.argv[2]], ['any', {$and:[anyf, searchable]}, null]]) {
    const t = Date.now();
    const n = await m.countDocuments(f, hint ? {hint} : {});
    console.log(name, n, (Date.now()-t)+' ms');
  }
  await c.close();
})();
